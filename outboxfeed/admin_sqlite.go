package outboxfeed

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Admin returns the operator interface of the SQLite store.
func (s *SQLiteStore) Admin() Admin { return sqliteAdmin{s} }

type sqliteAdmin struct{ s *SQLiteStore }

func sqliteTime(t time.Time) any { return t.UnixMicro() }

// jsonStrings encodes ids for json_each.
func jsonStrings(v []string) string {
	b, _ := json.Marshal(v) // a []string always encodes
	return string(b)
}

func jsonInts(v []int64) string {
	b, _ := json.Marshal(v) // a []int64 always encodes
	return string(b)
}

// Stats counts with three queries on the store's one connection; a
// transaction would take the write lock (BEGIN IMMEDIATE) for the scan.
func (a sqliteAdmin) Stats(ctx context.Context) (AdminStats, error) {
	st := newAdminStats()
	st.Now = time.Now().UTC()
	const none = int64(9223372036854775807)
	var oldest int64
	err := a.s.db.QueryRowContext(ctx, `SELECT min(
	coalesce((SELECT occurred_at FROM outbox WHERE state = 'pending' ORDER BY seq LIMIT 1), ?1),
	coalesce((SELECT min(occurred_at) FROM outbox WHERE state = 'processing'), ?1))`, none).Scan(&oldest)
	if err != nil {
		return AdminStats{}, fmt.Errorf("outboxfeed: admin stats: %w", err)
	}
	if oldest != none {
		st.OldestPending = micros(oldest)
		st.OldestPendingAge = max(0, st.Now.Sub(st.OldestPending))
	}
	err = a.each(ctx, `SELECT state, kind, count(*) FROM outbox GROUP BY state, kind`, nil, func(rows *sql.Rows) error {
		var state, kind string
		var n int64
		if err := rows.Scan(&state, &kind, &n); err != nil {
			return err
		}
		st.States[state] += n
		st.Kinds[kind] += n
		return nil
	})
	if err != nil {
		return AdminStats{}, fmt.Errorf("outboxfeed: admin stats: %w", err)
	}
	err = a.each(ctx, `SELECT type, schema_version, count(*) FROM outbox WHERE state = 'dead_letter'
GROUP BY type, schema_version ORDER BY count(*) DESC, type, schema_version`, nil, func(rows *sql.Rows) error {
		var tc TypeCount
		if err := rows.Scan(&tc.Type, &tc.SchemaVersion, &tc.Count); err != nil {
			return err
		}
		st.DeadLetters = append(st.DeadLetters, tc)
		return nil
	})
	if err != nil {
		return AdminStats{}, fmt.Errorf("outboxfeed: admin stats: %w", err)
	}
	return st, nil
}

// queryer is a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// each runs q on the store (or on tx when given) and calls fn per row.
func (a sqliteAdmin) each(ctx context.Context, q string, tx *sql.Tx, fn func(*sql.Rows) error, args ...any) error {
	var db queryer = a.s.db
	if tx != nil {
		db = tx
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// List reads one page in seq order.
func (a sqliteAdmin) List(ctx context.Context, f Filter) (Page, error) {
	f = f.withDefaults()
	if err := f.validate(); err != nil {
		return Page{}, err
	}
	args := &sqlArgs{}
	terms := selection{typ: f.Type, schemaVersion: f.SchemaVersion, tenant: f.Tenant, channel: f.Channel, since: f.Since, until: f.Until}.terms(args, sqliteTime)
	if f.State != "" {
		terms = append(terms, stateTerm(f.State))
	}
	if f.After > 0 {
		terms = append(terms, "seq > "+args.add(f.After))
	}
	q := `SELECT ` + sqliteRecordColumns + ` FROM outbox` + whereClause(terms) + ` ORDER BY seq LIMIT ` + args.add(f.Limit)
	var p Page
	err := a.each(ctx, q, nil, func(rows *sql.Rows) error {
		r, err := scanSQLiteRecord(rows)
		if err != nil {
			return err
		}
		p.Records = append(p.Records, r)
		return nil
	}, args.args...)
	if err != nil {
		return Page{}, fmt.Errorf("outboxfeed: list: %w", err)
	}
	if len(p.Records) == f.Limit {
		p.Next = p.Records[len(p.Records)-1].Seq
	}
	return p, nil
}

// Replay implements Admin.
func (a sqliteAdmin) Replay(ctx context.Context, r ReplayRequest) (ReplayResult, error) {
	return replay(ctx, a, r)
}

// wake tells this process's Workers; those of other processes find the
// replayed records by polling.
func (a sqliteAdmin) wake() { a.s.wakeup.broadcast() }

// states returns the state of each existing id.
func (a sqliteAdmin) states(ctx context.Context, ids []string) (map[string]string, error) {
	states := make(map[string]string, len(ids))
	err := a.each(ctx, `SELECT id, state FROM outbox WHERE id IN (SELECT value FROM json_each(?))`, nil,
		func(rows *sql.Rows) error {
			var id, state string
			if err := rows.Scan(&id, &state); err != nil {
				return err
			}
			states[id] = state
			return nil
		}, jsonStrings(ids))
	return states, err
}

// replayBatch moves up to n selected dead letters after seq `after` back
// to pending in one BEGIN IMMEDIATE transaction, auditing each first.
func (a sqliteAdmin) replayBatch(ctx context.Context, sel selection, actor, reason string, after int64, n int) ([]string, int64, error) {
	tx, err := a.s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = tx.Rollback() }()
	args := &sqlArgs{}
	terms := append([]string{stateTerm(StateDeadLetter), "seq > " + args.add(after)}, sel.terms(args, sqliteTime)...)
	q := `SELECT seq, id FROM outbox INDEXED BY outbox_dead_letter_idx WHERE ` + strings.Join(terms, " AND ") + ` ORDER BY seq LIMIT ` + args.add(n)
	var ids []string
	var seqs []int64
	err = a.each(ctx, q, tx, func(rows *sql.Rows) error {
		var seq int64
		var id string
		if err := rows.Scan(&seq, &id); err != nil {
			return err
		}
		seqs, ids = append(seqs, seq), append(ids, id)
		return nil
	}, args.args...)
	if err != nil || len(ids) == 0 {
		return nil, 0, err
	}
	picked := jsonInts(seqs)
	now := time.Now().UnixMicro()
	if _, err := tx.ExecContext(ctx, `INSERT INTO outbox_replay (message_id, actor, reason, replayed_at, failure)
SELECT id, ?, ?, ?, last_error FROM outbox
WHERE state = 'dead_letter' AND seq IN (SELECT value FROM json_each(?)) ORDER BY seq`,
		actor, reason, now, picked); err != nil {
		return nil, 0, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE outbox
SET state = 'pending', attempt = 0, next_attempt_at = ?, last_error = NULL, dead_lettered_at = NULL
WHERE state = 'dead_letter' AND seq IN (SELECT value FROM json_each(?))`, now, picked); err != nil {
		return nil, 0, err
	}
	if err := tx.Commit(); err != nil {
		return nil, 0, err
	}
	return ids, seqs[len(seqs)-1], nil
}

// Purge deletes in batches, each its own statement (and transaction), so
// Workers and producers get the write lock between batches.
func (a sqliteAdmin) Purge(ctx context.Context, r PurgeRequest) (PurgeResult, error) {
	r = r.withDefaults()
	if err := r.validate(); err != nil {
		return PurgeResult{}, err
	}
	res := PurgeResult{Cutoff: time.Now().Add(-r.OlderThan).UTC()}
	col := purgeColumn(r.State)
	args := &sqlArgs{}
	cond := stateTerm(r.State) + " AND " + col + " < " + args.add(res.Cutoff.UnixMicro())
	if r.Type != "" {
		cond += " AND type = " + args.add(r.Type)
	}
	if r.SchemaVersion > 0 {
		cond += " AND schema_version = " + args.add(r.SchemaVersion)
	}
	if r.DryRun {
		if err := a.s.db.QueryRowContext(ctx, `SELECT count(*) FROM outbox WHERE `+cond, args.args...).Scan(&res.Deleted); err != nil {
			return res, fmt.Errorf("outboxfeed: purge (dry run): %w", err)
		}
		return res, nil
	}
	// The partial index of the state gives the oldest rows first.
	q := `DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox INDEXED BY outbox_` + r.State + `_idx WHERE ` + cond +
		` ORDER BY ` + col + ` LIMIT ` + args.add(r.BatchSize) + `)`
	for {
		out, err := a.s.db.ExecContext(ctx, q, args.args...)
		var n int64
		if err == nil {
			n, err = out.RowsAffected()
		}
		if err != nil {
			return res, fmt.Errorf("outboxfeed: purge (%d deleted before the error): %w", res.Deleted, err)
		}
		res.Batches++
		res.Deleted += n
		if n < int64(r.BatchSize) {
			return res, nil
		}
	}
}

// Replays reads the audit rows of one message.
func (a sqliteAdmin) Replays(ctx context.Context, messageID string) ([]ReplayEntry, error) {
	if messageID == "" {
		return nil, invalid("empty id")
	}
	id, err := canonicalID(messageID)
	if err != nil {
		return nil, invalid("id %q is not a uuid", messageID)
	}
	var out []ReplayEntry
	err = a.each(ctx, `SELECT message_id, actor, reason, replayed_at, failure FROM outbox_replay
WHERE message_id = ? ORDER BY id`, nil, func(rows *sql.Rows) error {
		var e ReplayEntry
		var at int64
		if err := rows.Scan(&e.MessageID, &e.Actor, &e.Reason, &at, &e.Failure); err != nil {
			return err
		}
		e.At = micros(at)
		out = append(out, e)
		return nil
	}, id)
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: replays: %w", err)
	}
	return out, nil
}
