package outboxfeed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestPostgresAdmin(t *testing.T) { runAdminSuite(t, pgHarness) }

func TestSQLiteAdmin(t *testing.T) { runAdminSuite(t, sqliteHarness) }

// runAdminSuite runs the Admin and Pruner tests on fresh stores.
func runAdminSuite(t *testing.T, setup func(t *testing.T) *harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"StatsCountsStatesKindsAndDeadLetterTypes", testAdminStats},
		{"ListFiltersAndPages", testAdminList},
		{"ReplayByIDAfterRegistryRollForward", testAdminReplayByID},
		{"ReplayByTypeAndTimeRange", testAdminReplayByTypeAndRange},
		{"ReplayValidatesAndLimits", testAdminReplayValidation},
		{"ReplayManyInBatches", testAdminReplayMany},
		{"PurgeInBatchesAndDryRun", testAdminPurge},
		{"PrunerDeletesOldDispatched", testAdminPruner},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, setup(t))
		})
	}
}

func adminFor(t *testing.T, h *harness) Admin {
	t.Helper()
	a, err := AdminOf(h.store)
	if err != nil {
		t.Fatalf("AdminOf: %v", err)
	}
	return a
}

// agoSQL is a store-clock timestamp d ago, in the store's SQL.
func agoSQL(h *harness, d time.Duration) string {
	if h.table == "outbox" {
		return fmt.Sprintf("(CAST(unixepoch('subsec') * 1000000 AS INTEGER) - %d)", d.Microseconds())
	}
	return fmt.Sprintf("(now() - %d * interval '1 microsecond')", d.Microseconds())
}

// deadLetterSQL moves a pending record to dead_letter by hand, as the
// CHECK constraints allow (what a Worker's DeadLetter writes).
func deadLetterSQL(t *testing.T, h *harness, id, reason string) {
	t.Helper()
	q := fmt.Sprintf("UPDATE %s SET state = 'dead_letter', attempt = 3, last_error = '%s', dead_lettered_at = %s WHERE id = '%s'",
		h.table, reason, agoSQL(h, 0), id)
	if err := h.exec(context.Background(), q); err != nil {
		t.Fatalf("dead-letter %s: %v", id, err)
	}
}

// dispatchedSQL marks a pending record dispatched d ago.
func dispatchedSQL(t *testing.T, h *harness, id string, d time.Duration) {
	t.Helper()
	q := fmt.Sprintf("UPDATE %s SET state = 'dispatched', dispatched_at = %s WHERE id = '%s'", h.table, agoSQL(h, d), id)
	if err := h.exec(context.Background(), q); err != nil {
		t.Fatalf("dispatch %s: %v", id, err)
	}
}

// replayRowCount counts outbox_replay rows with raw SQL.
func replayRowCount(t *testing.T, h *harness) int {
	t.Helper()
	var n int
	var err error
	switch s := h.store.(type) {
	case *PGStore:
		err = s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM herald.outbox_replay`).Scan(&n)
	case *SQLiteStore:
		err = s.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM outbox_replay`).Scan(&n)
	default:
		t.Fatalf("unknown store %T", h.store)
	}
	if err != nil {
		t.Fatalf("count outbox_replay: %v", err)
	}
	return n
}

func stageAll(t *testing.T, h *harness, ns ...Notification) []string {
	t.Helper()
	return h.stage(t, true, ns...)
}

func testAdminStats(t *testing.T, h *harness) {
	ctx := context.Background()
	a := adminFor(t, h)
	st, err := a.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.States) != 4 || st.States[StatePending] != 0 || !st.OldestPending.IsZero() || st.OldestPendingAge != 0 || len(st.DeadLetters) != 0 {
		t.Fatalf("empty store stats = %+v", st)
	}
	old := note("orders/1", `{}`)
	old.OccurredAt = time.Now().Add(-time.Hour)
	event := note("orders/2", `{}`)
	event.Kind = KindIntegrationEvent
	v2 := note("orders/3", `{}`)
	v2.SchemaVersion = 2
	invoice := note("invoices/1", `{}`)
	invoice.Type = "invoice.paid"
	ids := stageAll(t, h, old, event, v2, v2, invoice, note("orders/4", `{}`))
	deadLetterSQL(t, h, ids[2], "no reader for order.updated v2")
	deadLetterSQL(t, h, ids[3], "no reader for order.updated v2")
	deadLetterSQL(t, h, ids[4], "no reader for invoice.paid v1")
	dispatchedSQL(t, h, ids[5], time.Minute)
	if _, err := h.store.Claim(ctx, "w1", 1, time.Minute); err != nil { // the old record: processing
		t.Fatal(err)
	}

	st, err = a.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{StatePending: 1, StateProcessing: 1, StateDispatched: 1, StateDeadLetter: 3}
	if fmt.Sprint(st.States) != fmt.Sprint(want) {
		t.Errorf("States = %v, want %v", st.States, want)
	}
	if fmt.Sprint(st.Kinds) != fmt.Sprint(map[string]int64{KindIntegrationEvent: 1, KindNotification: 5}) {
		t.Errorf("Kinds = %v", st.Kinds)
	}
	wantDL := []TypeCount{{"order.updated", 2, 2}, {"invoice.paid", 1, 1}}
	if !slices.Equal(st.DeadLetters, wantDL) {
		t.Errorf("DeadLetters = %v, want %v", st.DeadLetters, wantDL)
	}
	if d := old.OccurredAt.Sub(st.OldestPending); d > time.Millisecond || d < -time.Millisecond {
		t.Errorf("OldestPending = %v, want the processing record's %v", st.OldestPending, old.OccurredAt)
	}
	if st.OldestPendingAge < 59*time.Minute || st.OldestPendingAge > 61*time.Minute || st.Now.IsZero() {
		t.Errorf("OldestPendingAge = %v (now %v), want about 1h", st.OldestPendingAge, st.Now)
	}
}

func testAdminList(t *testing.T, h *harness) {
	ctx := context.Background()
	a := adminFor(t, h)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	var ns []Notification
	for i := range 7 {
		n := note(fmt.Sprintf("orders/%d", i%2), fmt.Sprintf(`{"i":%d}`, i))
		n.OccurredAt = base.Add(time.Duration(i) * time.Minute)
		if i == 6 {
			n.TenantID, n.Type = "globex", "invoice.paid"
		}
		if i == 5 {
			n.SchemaVersion = 2
		}
		ns = append(ns, n)
	}
	ids := stageAll(t, h, ns...)
	deadLetterSQL(t, h, ids[1], "target said no")

	collect := func(f Filter) []string {
		t.Helper()
		var got []string
		for pages := 0; ; pages++ {
			p, err := a.List(ctx, f)
			if err != nil {
				t.Fatalf("List(%+v): %v", f, err)
			}
			for _, r := range p.Records {
				got = append(got, r.ID)
			}
			if p.Next == 0 {
				return got
			}
			if pages > 10 {
				t.Fatal("paging does not end")
			}
			f.After = p.Next
		}
	}
	cases := []struct {
		name string
		f    Filter
		want []string
	}{
		{"all in pages of 2", Filter{Limit: 2}, ids},
		{"dead letters", Filter{State: StateDeadLetter}, ids[1:2]},
		{"pending", Filter{State: StatePending, Limit: 3}, []string{ids[0], ids[2], ids[3], ids[4], ids[5], ids[6]}},
		{"type", Filter{Type: "invoice.paid"}, ids[6:]},
		{"type and version", Filter{Type: "order.updated", SchemaVersion: 2}, ids[5:6]},
		{"tenant", Filter{Tenant: "acme", Limit: 10}, ids[:6]},
		{"channel", Filter{Tenant: "acme", Channel: "orders/1"}, []string{ids[1], ids[3], ids[5]}},
		{"since until", Filter{Since: base.Add(2 * time.Minute), Until: base.Add(4 * time.Minute)}, ids[2:4]},
		{"nothing", Filter{State: StateDispatched}, nil},
	}
	for _, c := range cases {
		if got := collect(c.f); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	p, err := a.List(ctx, Filter{State: StateDeadLetter})
	if err != nil || len(p.Records) != 1 {
		t.Fatalf("dead letters = %+v, %v", p, err)
	}
	r := p.Records[0]
	if dl, ok := r.State.(DeadLetter); !ok || dl.Reason != "target said no" || LastError(r.State) != "target said no" || r.Attempt != 3 {
		t.Fatalf("listed dead letter = %+v", r)
	}
	if !jsonEqual(t, r.Payload, json.RawMessage(`{"i":1}`)) || r.Channel != "orders/1" || r.Seq == 0 {
		t.Fatalf("listed record = %+v", r)
	}
	for _, bad := range []Filter{
		{State: "lost"}, {Limit: -1}, {Limit: MaxListLimit + 1}, {After: -1},
		{Since: base, Until: base}, {SchemaVersion: -1},
	} {
		if _, err := a.List(ctx, bad); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("List(%+v) err = %v, want ErrInvalidRequest", bad, err)
		}
	}
}

func testAdminReplayByID(t *testing.T, h *harness) {
	ctx := context.Background()
	a := adminFor(t, h)
	// An older Worker (reader for v1 only) meets a record of a newer writer.
	v1, err := ParseRegistry([]byte(`{"order.updated": {"versions": [1]}}`))
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	w := startWorker(t, h.store, rec, WorkerConfig{Registry: v1})
	n := note("orders/1", `{"status":"paid","total":12.5}`)
	n.SchemaVersion = 2
	n.Freshness = json.RawMessage(`{"mode":"advisory","authority":"order-1"}`)
	ids := stageAll(t, h, n, note("orders/2", `{}`))
	id, pendingID := ids[0], ids[1]
	eventually(t, 5*time.Second, "dead letter", func() bool { _, ok := stateOf(t, h.store, id).(DeadLetter); return ok })
	rec.waitFor(t, 5*time.Second, "the readable record", func() bool { _, ok := rec.byID(pendingID); return ok })
	w.Stop()
	before := mustGet(t, h.store, id)
	const failure = "no reader for order.updated v2"
	if LastError(before.State) != failure {
		t.Fatalf("dead letter = %#v", before.State)
	}

	start := time.Now().Add(-time.Second)
	missing := "0190f0c4-9999-4999-8999-999999999999"
	res, err := a.Replay(ctx, ReplayRequest{
		IDs:   []string{strings.ToUpper(id), id, pendingID, missing},
		Actor: "alice", Reason: "reader for v2 deployed",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Replayed, []string{id}) {
		t.Fatalf("Replayed = %v, want [%s]", res.Replayed, id)
	}
	wantSkips := map[string]string{pendingID: StateDispatched, missing: ""}
	if len(res.Skipped) != 2 {
		t.Fatalf("Skipped = %+v", res.Skipped)
	}
	for _, s := range res.Skipped {
		if st, ok := wantSkips[s.ID]; !ok || s.State != st || s.Reason == "" {
			t.Errorf("skip %+v, want state %q and a reason", s, st)
		}
	}
	after := mustGet(t, h.store, id)
	p, ok := after.State.(Pending)
	if !ok || p.Attempt != 0 || p.LastError != "" || after.Attempt != 0 || time.Since(p.NextAttemptAt) > time.Minute {
		t.Fatalf("replayed state = %#v (attempt %d)", after.State, after.Attempt)
	}
	if after.ID != before.ID || after.Seq != before.Seq || !jsonEqual(t, after.Payload, before.Payload) ||
		!jsonEqual(t, after.Freshness, before.Freshness) || !after.OccurredAt.Equal(before.OccurredAt) ||
		after.Type != before.Type || after.SchemaVersion != 2 {
		t.Fatalf("replay changed the record:\nbefore %+v\nafter  %+v", before, after)
	}
	entries, err := a.Replays(ctx, strings.ToUpper(id))
	if err != nil || len(entries) != 1 {
		t.Fatalf("Replays = %+v, %v", entries, err)
	}
	e := entries[0]
	if e.MessageID != id || e.Actor != "alice" || e.Reason != "reader for v2 deployed" || e.Failure != failure ||
		e.At.Before(start) || e.At.After(time.Now().Add(time.Second)) {
		t.Fatalf("audit row = %+v", e)
	}
	if n := replayRowCount(t, h); n != 1 {
		t.Fatalf("%d outbox_replay rows, want 1", n)
	}

	// After the roll-forward, a Worker that reads v2 dispatches it, same id.
	v12, err := ParseRegistry([]byte(`{"order.updated": {"versions": [1, 2]}}`))
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, h.store, rec, WorkerConfig{Registry: v12})
	rec.waitFor(t, 5*time.Second, "the replayed record", func() bool { _, ok := rec.byID(id); return ok })
	msg, _ := rec.byID(id)
	if !jsonEqual(t, msg.Data, n.Payload) || msg.SchemaVersion != 2 {
		t.Fatalf("published %+v", msg)
	}
	eventually(t, 5*time.Second, "dispatched", func() bool { _, ok := stateOf(t, h.store, id).(Dispatched); return ok })

	// Replaying it again changes nothing and says why.
	res, err = a.Replay(ctx, ReplayRequest{IDs: []string{id}, Actor: "alice", Reason: "again"})
	if err != nil || len(res.Replayed) != 0 || len(res.Skipped) != 1 || res.Skipped[0].State != StateDispatched {
		t.Fatalf("second replay = %+v, %v", res, err)
	}
	if n := replayRowCount(t, h); n != 1 {
		t.Fatalf("%d outbox_replay rows after a skipped replay, want 1", n)
	}
}

func testAdminReplayByTypeAndRange(t *testing.T, h *harness) {
	ctx := context.Background()
	a := adminFor(t, h)
	base := time.Now().Add(-5 * time.Hour).Truncate(time.Second)
	var ns []Notification
	for i := range 5 { // order.updated v1 at base+0h … base+4h
		n := note(fmt.Sprintf("orders/%d", i), `{}`)
		n.OccurredAt = base.Add(time.Duration(i) * time.Hour)
		ns = append(ns, n)
	}
	inv := note("invoices/1", `{}`)
	inv.Type, inv.OccurredAt = "invoice.paid", base.Add(90*time.Minute)
	v2 := note("orders/9", `{}`)
	v2.SchemaVersion, v2.OccurredAt = 2, base.Add(time.Hour)
	ids := stageAll(t, h, append(ns, inv, v2)...)
	for _, id := range ids {
		deadLetterSQL(t, h, id, "failed "+id[:8])
	}

	// Time range [base+1h, base+3h): records 1 and 2 of any type.
	res, err := a.Replay(ctx, ReplayRequest{Since: base.Add(time.Hour), Until: base.Add(3 * time.Hour), Type: "order.updated", SchemaVersion: 1, Actor: "ops", Reason: "incident 42"})
	if err != nil || !slices.Equal(res.Replayed, ids[1:3]) || len(res.Skipped) != 0 {
		t.Fatalf("range replay = %+v, %v; want %v", res, err, ids[1:3])
	}
	res, err = a.Replay(ctx, ReplayRequest{Since: base.Add(time.Hour), Until: base.Add(3 * time.Hour), Actor: "ops", Reason: "incident 42, other types"})
	if err != nil || !slices.Equal(res.Replayed, []string{ids[5], ids[6]}) {
		t.Fatalf("range replay, any type = %+v, %v; want %v", res, err, []string{ids[5], ids[6]})
	}
	// By type: what is left of order.updated (records 0, 3, 4).
	res, err = a.Replay(ctx, ReplayRequest{Type: "order.updated", Actor: "ops", Reason: "fixed"})
	if err != nil || !slices.Equal(res.Replayed, []string{ids[0], ids[3], ids[4]}) {
		t.Fatalf("type replay = %+v, %v", res, err)
	}
	st, err := a.Stats(ctx)
	if err != nil || st.States[StateDeadLetter] != 0 || st.States[StatePending] != 7 {
		t.Fatalf("stats after replays = %+v, %v", st, err)
	}
	if n := replayRowCount(t, h); n != 7 {
		t.Fatalf("%d outbox_replay rows, want 7", n)
	}
	for _, id := range ids {
		es, err := a.Replays(ctx, id)
		if err != nil || len(es) != 1 || es[0].Failure != "failed "+id[:8] || es[0].Actor != "ops" {
			t.Fatalf("Replays(%s) = %+v, %v", id, es, err)
		}
	}
	// A Worker dispatches every one of them.
	rec := newRecorder()
	startWorker(t, h.store, rec, WorkerConfig{})
	rec.waitFor(t, 5*time.Second, "all replayed records", func() bool { return rec.count() == len(ids) })
}

func testAdminReplayValidation(t *testing.T, h *harness) {
	ctx := context.Background()
	a := adminFor(t, h)
	var ns []Notification
	for i := range 5 {
		ns = append(ns, note("orders/1", fmt.Sprintf(`{"i":%d}`, i)))
	}
	ids := stageAll(t, h, ns...)
	for _, id := range ids {
		deadLetterSQL(t, h, id, "boom")
	}
	for _, bad := range []ReplayRequest{
		{IDs: ids[:1], Reason: "no actor"},
		{IDs: ids[:1], Actor: "no reason"},
		{Actor: "a", Reason: "no selector"},
		{IDs: []string{"not-a-uuid"}, Actor: "a", Reason: "r"},
		{IDs: []string{""}, Actor: "a", Reason: "r"},
		{Type: "Bad Type", Actor: "a", Reason: "r"},
		{SchemaVersion: 2, Since: time.Now().Add(-time.Hour), Actor: "a", Reason: "r"},
		{Type: "order.updated", Limit: -1, Actor: "a", Reason: "r"},
		{Since: time.Now(), Until: time.Now().Add(-time.Hour), Actor: "a", Reason: "r"},
		{Type: "order.updated", BatchSize: -1, Actor: "a", Reason: "r"},
	} {
		if _, err := a.Replay(ctx, bad); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Replay(%+v) err = %v, want ErrInvalidRequest", bad, err)
		}
	}
	if n := replayRowCount(t, h); n != 0 {
		t.Fatalf("invalid requests wrote %d audit rows", n)
	}
	res, err := a.Replay(ctx, ReplayRequest{Type: "order.updated", Limit: 2, Actor: "a", Reason: "two first"})
	if err != nil || !slices.Equal(res.Replayed, ids[:2]) {
		t.Fatalf("limited replay = %+v, %v", res, err)
	}
	res, err = a.Replay(ctx, ReplayRequest{IDs: ids[2:], Limit: 1, Actor: "a", Reason: "one more"})
	if err != nil || !slices.Equal(res.Replayed, ids[2:3]) || len(res.Skipped) != 2 || res.Skipped[0].State != StateDeadLetter {
		t.Fatalf("limited replay by id = %+v, %v", res, err)
	}
	if _, err := a.Replays(ctx, "nope"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Replays(nope) err = %v", err)
	}
	if _, err := AdminOf(struct{ Store }{h.store}); !errors.Is(err, ErrNoAdmin) {
		t.Fatalf("AdminOf(wrapper without Admin) err = %v, want ErrNoAdmin", err)
	}
}

func testAdminReplayMany(t *testing.T, h *harness) {
	ctx := context.Background()
	a := adminFor(t, h)
	const n, batch = 40, 7
	ns := make([]Notification, n)
	for i := range ns {
		ns[i] = note(fmt.Sprintf("orders/%d", i%9), fmt.Sprintf(`{"i":%d}`, i))
		ns[i].Type = "bulk.type"
	}
	ids := stageAll(t, h, ns...)
	q := fmt.Sprintf("UPDATE %s SET state = 'dead_letter', attempt = 1, last_error = 'bulk failure', dead_lettered_at = %s WHERE type = 'bulk.type'",
		h.table, agoSQL(h, 0))
	if err := h.exec(ctx, q); err != nil {
		t.Fatal(err)
	}
	res, err := a.Replay(ctx, ReplayRequest{Type: "bulk.type", Actor: "ops", Reason: "bulk", BatchSize: batch})
	if err != nil || !slices.Equal(res.Replayed, ids) {
		t.Fatalf("replayed %d of %d (in seq order: %v), err %v", len(res.Replayed), n, slices.Equal(res.Replayed, ids), err)
	}
	st, err := a.Stats(ctx)
	if err != nil || st.States[StatePending] != n || st.States[StateDeadLetter] != 0 {
		t.Fatalf("stats = %+v, %v", st, err)
	}
	if got := replayRowCount(t, h); got != n {
		t.Fatalf("%d audit rows, want %d", got, n)
	}
}

func testAdminPurge(t *testing.T, h *harness) {
	ctx := context.Background()
	a := adminFor(t, h)
	var ns []Notification
	for i := range 9 {
		n := note(fmt.Sprintf("orders/%d", i), `{}`)
		if i == 4 {
			n.Type = "invoice.paid"
		}
		ns = append(ns, n)
	}
	ids := stageAll(t, h, ns...)
	for _, id := range ids[:5] { // five old dispatched (one invoice)
		dispatchedSQL(t, h, id, 10*24*time.Hour)
	}
	dispatchedSQL(t, h, ids[5], time.Hour) // young
	deadLetterSQL(t, h, ids[6], "old failure")
	deadLetterSQL(t, h, ids[7], "old failure") // ids[8] stays pending

	for _, bad := range []PurgeRequest{
		{State: StatePending}, {State: StateProcessing}, {State: ""},
		{State: StateDispatched, OlderThan: -time.Second},
		{State: StateDispatched, BatchSize: -1},
		{State: StateDispatched, Type: "Bad"},
		{State: StateDispatched, SchemaVersion: 2},
		{State: StateDispatched, Type: "order.updated", SchemaVersion: -1},
	} {
		if _, err := a.Purge(ctx, bad); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Purge(%+v) err = %v, want ErrInvalidRequest", bad, err)
		}
	}
	week := 7 * 24 * time.Hour
	dry, err := a.Purge(ctx, PurgeRequest{State: StateDispatched, OlderThan: week, DryRun: true})
	if err != nil || dry.Deleted != 5 || dry.Batches != 0 || time.Since(dry.Cutoff) < week-time.Minute {
		t.Fatalf("dry run = %+v, %v", dry, err)
	}
	if st, _ := a.Stats(ctx); st.States[StateDispatched] != 6 {
		t.Fatalf("dry run deleted: %v", st.States)
	}
	res, err := a.Purge(ctx, PurgeRequest{State: StateDispatched, OlderThan: week, Type: "invoice.paid", SchemaVersion: 2})
	if err != nil || res.Deleted != 0 {
		t.Fatalf("purge by type and absent version = %+v, %v", res, err)
	}
	res, err = a.Purge(ctx, PurgeRequest{State: StateDispatched, OlderThan: week, Type: "invoice.paid", SchemaVersion: 1})
	if err != nil || res.Deleted != 1 {
		t.Fatalf("purge by type = %+v, %v", res, err)
	}
	res, err = a.Purge(ctx, PurgeRequest{State: StateDispatched, OlderThan: week, BatchSize: 2})
	if err != nil || res.Deleted != 4 || res.Batches != 3 {
		t.Fatalf("batched purge = %+v, %v; want 4 deleted in 3 batches", res, err)
	}
	for _, id := range ids[:5] {
		if _, err := h.store.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s survived the purge: %v", id, err)
		}
	}
	res, err = a.Purge(ctx, PurgeRequest{State: StateDeadLetter})
	if err != nil || res.Deleted != 2 {
		t.Fatalf("dead-letter purge = %+v, %v", res, err)
	}
	st, err := a.Stats(ctx)
	want := map[string]int64{StatePending: 1, StateProcessing: 0, StateDispatched: 1, StateDeadLetter: 0}
	if err != nil || fmt.Sprint(st.States) != fmt.Sprint(want) {
		t.Fatalf("after purges: %v, %v; want %v", st.States, err, want)
	}
}

func testAdminPruner(t *testing.T, h *harness) {
	ctx := context.Background()
	if _, err := NewPruner(h.store, PrunerConfig{Retention: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("negative retention: err = %v", err)
	}
	if _, err := NewPruner(struct{ Store }{h.store}, PrunerConfig{}); !errors.Is(err, ErrNoAdmin) {
		t.Fatalf("store without admin: err = %v", err)
	}
	var ns []Notification
	for i := range 7 {
		ns = append(ns, note(fmt.Sprintf("orders/%d", i), `{}`))
	}
	ids := stageAll(t, h, ns...)
	for _, id := range ids[:5] {
		dispatchedSQL(t, h, id, 8*24*time.Hour)
	}
	dispatchedSQL(t, h, ids[5], 6*24*time.Hour)
	deadLetterSQL(t, h, ids[6], "kept for an operator")

	idle, err := NewPruner(h.store, PrunerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	idle.Stop() // before Start: harmless
	reg := prometheus.NewRegistry()
	p, err := NewPruner(h.store, PrunerConfig{BatchSize: 2, Interval: 20 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	eventually(t, 5*time.Second, "old dispatched records pruned", func() bool {
		return testutil.ToFloat64(p.pruned) == 5
	})
	p.Stop()
	p.Stop()
	if err := p.Start(ctx); !errors.Is(err, ErrPrunerStopped) {
		t.Fatalf("Start after Stop: err = %v", err)
	}
	for _, id := range ids[:5] {
		if _, err := h.store.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s not pruned: %v", id, err)
		}
	}
	if _, ok := stateOf(t, h.store, ids[5]).(Dispatched); !ok {
		t.Error("a dispatched record younger than the retention was pruned")
	}
	if _, ok := stateOf(t, h.store, ids[6]).(DeadLetter); !ok {
		t.Error("a dead letter was pruned")
	}
	if n, err := testutil.GatherAndCount(reg, "herald_outbox_pruned_total"); err != nil || n != 1 {
		t.Fatalf("registered pruner metrics: %d, %v", n, err)
	}
	// One run by hand, with a short retention.
	q, err := NewPruner(h.store, PrunerConfig{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := q.Prune(ctx); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1", n, err)
	}
	if got := testutil.ToFloat64(q.pruned); got != 1 {
		t.Fatalf("herald_outbox_pruned_total = %v", got)
	}
}
