// Package storekit is what the outbox stores (pgstore, sqlitestore)
// share and nothing else needs: the SQL of the admin selections, the
// replay loop, the decoding of lifecycle columns and the get of one
// record, the migration files with the schema version and the way up or
// back, handler registration, the checks and errors of a lease renewal,
// in-process wake-ups.
package storekit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
)

// PurgeColumn is the time column a purge of state measures age on (state
// is validated, so this never sees user text).
func PurgeColumn(state string) string {
	if state == outboxfeed.StateDeadLetter {
		return "dead_lettered_at"
	}
	return "dispatched_at"
}

// Skips reports, for each requested id not replayed, why: looked up in
// states (id → state; absent = no record). limited says the request's
// Limit stopped the replay early.
func Skips(requested []string, replayed map[string]bool, states map[string]string, limited bool) []outboxfeed.Skip {
	var out []outboxfeed.Skip
	for _, id := range requested {
		if replayed[id] {
			continue
		}
		st, ok := states[id]
		switch {
		case !ok:
			out = append(out, outboxfeed.Skip{ID: id, Reason: "no such record"})
		case st == outboxfeed.StateDeadLetter && limited:
			out = append(out, outboxfeed.Skip{ID: id, State: st, Reason: "not reached: the replay limit was hit first"})
		case st == outboxfeed.StateDeadLetter:
			out = append(out, outboxfeed.Skip{ID: id, State: st, Reason: "dead letter outside the type or time range given"})
		default:
			out = append(out, outboxfeed.Skip{ID: id, State: st, Reason: "state " + st + ": only dead_letter records are replayed"})
		}
	}
	return out
}

// SQLArgs collects query arguments and hands out their placeholders:
// $n for PostgreSQL, ? for SQLite (whose arguments must then be taken in
// the order the placeholders appear in the text).
type SQLArgs struct {
	PG   bool
	Args []any
}

func (a *SQLArgs) Add(v any) string {
	a.Args = append(a.Args, v)
	if a.PG {
		return fmt.Sprintf("$%d", len(a.Args))
	}
	return "?"
}

// Selection is what List and Replay match on, besides the state.
type Selection struct {
	IDs           []string
	Type          string
	SchemaVersion int
	Tenant        string
	Channel       string
	Since, Until  time.Time
}

// Terms renders s as SQL conditions, adding their arguments to a; ts
// converts a time to the store's column type.
func (s Selection) Terms(a *SQLArgs, ts func(time.Time) any) []string {
	var out []string
	if len(s.IDs) > 0 {
		if a.PG {
			out = append(out, "id = ANY("+a.Add(s.IDs)+"::uuid[])")
		} else {
			out = append(out, "id IN (SELECT value FROM json_each("+a.Add(JSONStrings(s.IDs))+"))")
		}
	}
	eq := func(col, v string) {
		if v != "" {
			out = append(out, col+" = "+a.Add(v))
		}
	}
	eq("type", s.Type)
	if s.SchemaVersion > 0 {
		out = append(out, "schema_version = "+a.Add(s.SchemaVersion))
	}
	eq("tenant_id", s.Tenant)
	eq("channel", s.Channel)
	if !s.Since.IsZero() {
		out = append(out, "occurred_at >= "+a.Add(ts(s.Since)))
	}
	if !s.Until.IsZero() {
		out = append(out, "occurred_at < "+a.Add(ts(s.Until)))
	}
	return out
}

// StateTerm is the condition on a validated state name, written as
// literals so the planner can use a partial index. The CHECK constraints
// tie each state to its timestamps, so the added column terms change no
// result; they name the predicates of the PostgreSQL indexes (unresolved,
// dead letter, dispatched), which are not on state so that state changes
// stay HOT updates.
func StateTerm(state string) string {
	t := "state = '" + state + "'"
	switch state {
	case outboxfeed.StatePending, outboxfeed.StateProcessing:
		t += " AND dispatched_at IS NULL AND dead_lettered_at IS NULL"
	case outboxfeed.StateDeadLetter:
		t += " AND dead_lettered_at IS NOT NULL"
	case outboxfeed.StateDispatched:
		t += " AND dispatched_at IS NOT NULL"
	}
	return t
}

// Replayer is what the shared Replay loop needs from a store's admin.
type Replayer interface {
	// ReplayBatch moves up to n selected dead letters after seq `after`
	// back to pending in one transaction, auditing each, and returns their
	// ids and the last seq.
	ReplayBatch(ctx context.Context, sel Selection, actor, reason string, after int64, n int) ([]string, int64, error)
	// States returns the state of each existing id.
	States(ctx context.Context, ids []string) (map[string]string, error)
	// Wake tells Workers that records became pending.
	Wake()
}

// Replay replays batch after batch, walking seq forward so a record that
// is dead-lettered again meanwhile is not replayed twice by one call.
func Replay(ctx context.Context, a Replayer, r outboxfeed.ReplayRequest) (outboxfeed.ReplayResult, error) {
	r, err := r.Normalized()
	if err != nil {
		return outboxfeed.ReplayResult{}, err
	}
	ids := r.IDs
	sel := Selection{IDs: ids, Type: r.Type, SchemaVersion: r.SchemaVersion, Since: r.Since, Until: r.Until}
	var res outboxfeed.ReplayResult
	var cursor int64
	limited := false
	for {
		n := r.BatchSize
		if r.Limit > 0 {
			left := r.Limit - len(res.Replayed)
			if left <= 0 {
				limited = true
				break
			}
			n = min(n, left)
		}
		got, last, err := a.ReplayBatch(ctx, sel, r.Actor, r.Reason, cursor, n)
		if err != nil {
			return res, fmt.Errorf("outboxfeed: replay (%d replayed before the error): %w", len(res.Replayed), err)
		}
		res.Replayed = append(res.Replayed, got...)
		if len(got) < n {
			break
		}
		cursor = last
	}
	if len(res.Replayed) > 0 {
		a.Wake()
	}
	if len(ids) > 0 {
		states, err := a.States(ctx, ids)
		if err != nil {
			return res, fmt.Errorf("outboxfeed: replay: %w", err)
		}
		res.Skipped = Skips(ids, SetOf(res.Replayed), states, limited)
	}
	return res, nil
}

// WhereClause is terms joined as a WHERE clause ("" for none).
func WhereClause(terms []string) string {
	if len(terms) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(terms, " AND ")
}

// NewAdminStats is an AdminStats with every state counted at zero.
func NewAdminStats() outboxfeed.AdminStats {
	return outboxfeed.AdminStats{
		States: map[string]int64{outboxfeed.StatePending: 0, outboxfeed.StateProcessing: 0, outboxfeed.StateDispatched: 0, outboxfeed.StateDeadLetter: 0},
		Kinds:  map[string]int64{},
	}
}
