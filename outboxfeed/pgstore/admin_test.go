package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/storetest"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/heraldgw/herald/internal/testenv"
)

// pgAdminDrive claims batch after batch (any partition) and completes
// each: a record whose id is in first gets that outcome the first time it
// is claimed, every other record (and a record claimed again) OutcomeDone.
// It stops when no partition has anything to dispatch.
func pgAdminDrive(t *testing.T, s *Store, first map[string]outboxfeed.Outcome) {
	t.Helper()
	ctx := context.Background()
	used := map[string]bool{}
	for range 100 {
		b, err := s.Claim(ctx, outboxfeed.ClaimRequest{Owner: "w", Partition: outboxfeed.AnyPartition, Limit: 100, Lease: time.Minute})
		testenv.Must(t, err, "claim")
		if b == nil {
			return
		}
		out := make([]outboxfeed.Outcome, len(b.Records))
		for i, r := range b.Records {
			if o, ok := first[r.ID]; ok && !used[r.ID] {
				used[r.ID] = true
				out[i] = o
			}
		}
		held, _, err := s.Complete(ctx, b, out, nil)
		testenv.Must(t, err, "complete")
		if !held {
			t.Fatalf("complete: lease of partition %d lost", b.Partition)
		}
	}
	t.Fatal("drive: still claiming after 100 batches")
}

func pgAdminStage(t *testing.T, s *Store, channel, typ string, version int) string {
	t.Helper()
	id, err := stageOne(context.Background(), s, stage.Notification{
		TenantID: "acme", Channel: channel, Type: typ, SchemaVersion: version, Payload: json.RawMessage(`{"n":1}`),
	})
	testenv.Must(t, err, "stage "+channel)
	return id
}

// pgAdminFixture is a store holding records in every state.
type pgAdminFixture struct {
	s   *Store
	a   outboxfeed.Admin
	dl  []string          // dead letters: order.updated v1, order.updated v1, invoice.paid v2
	ok  []string          // dispatched at the first attempt (only in herald.outbox)
	h   string            // held once, then dispatched (a dispatched retry-queue row)
	r   string            // failed, retry due in an hour (pending in the retry queue)
	p   string            // claimed and not completed (processing)
	q   string            // staged last (pending, from herald.outbox)
	pb  *outboxfeed.Batch // the batch holding p, under owner "holder"
	all []string          // every id, in staging order
}

func newPGAdminFixture(t *testing.T) *pgAdminFixture {
	t.Helper()
	s, _ := newPGStore(t, Config{})
	a, err := outboxfeed.AdminOf(s)
	testenv.Must(t, err, "admin")
	f := &pgAdminFixture{s: s, a: a}
	f.dl = []string{
		pgAdminStage(t, s, "dl/1", "order.updated", 1),
		pgAdminStage(t, s, "dl/2", "order.updated", 1),
		pgAdminStage(t, s, "dl/3", "invoice.paid", 2),
	}
	f.ok = []string{pgAdminStage(t, s, "ok/1", "order.updated", 1), pgAdminStage(t, s, "ok/2", "order.updated", 1)}
	f.h = pgAdminStage(t, s, "hold/1", "order.updated", 1)
	f.r = pgAdminStage(t, s, "retry/1", "order.updated", 1)
	first := map[string]outboxfeed.Outcome{
		f.h: {Kind: outboxfeed.OutcomeHold},
		f.r: {Kind: outboxfeed.OutcomeRetryLater, Delay: time.Hour, Err: "try later"},
	}
	for _, id := range f.dl {
		first[id] = outboxfeed.Outcome{Kind: outboxfeed.OutcomeDeadLettered, Err: "boom"}
	}
	pgAdminDrive(t, s, first)

	f.p = pgAdminStage(t, s, "proc/1", "order.updated", 1)
	ctx := context.Background()
	b, err := s.Claim(ctx, outboxfeed.ClaimRequest{Owner: "holder", Partition: outboxfeed.AnyPartition, Limit: 100, Lease: time.Minute})
	testenv.Must(t, err, "claim processing")
	if b == nil || !slices.ContainsFunc(b.Records, func(r outboxfeed.Record) bool { return r.ID == f.p }) {
		t.Fatalf("claim for the processing record: %+v", b)
	}
	f.pb = b
	f.q = pgAdminStage(t, s, "pend/1", "order.updated", 1)
	f.all = append(append(append([]string{}, f.dl...), f.ok...), f.h, f.r, f.p, f.q)

	// The fixture is what it claims to be.
	want := map[string]string{f.h: outboxfeed.StateDispatched, f.r: outboxfeed.StatePending, f.p: outboxfeed.StateProcessing, f.q: outboxfeed.StatePending}
	for _, id := range f.dl {
		want[id] = outboxfeed.StateDeadLetter
	}
	for _, id := range f.ok {
		want[id] = outboxfeed.StateDispatched
	}
	for id, st := range want {
		if got := storetest.StateOf(t, s, id).Name(); got != st {
			t.Fatalf("fixture: %s is %s, want %s", id, got, st)
		}
	}
	return f
}

func (f *pgAdminFixture) count(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	var n int64
	testenv.Must(t, f.s.Pool().QueryRow(context.Background(), q, args...).Scan(&n), q)
	return n
}

func listIDs(p outboxfeed.Page) []string {
	var out []string
	for _, r := range p.Records {
		out = append(out, r.ID)
	}
	return out
}

func TestPostgresAdminStats(t *testing.T) {
	f := newPGAdminFixture(t)
	st, err := f.a.Stats(context.Background())
	testenv.Must(t, err, "stats")
	want := map[string]int64{outboxfeed.StatePending: 2, outboxfeed.StateProcessing: 1, outboxfeed.StateDispatched: 3, outboxfeed.StateDeadLetter: 3}
	for k, v := range want {
		if st.States[k] != v {
			t.Errorf("States[%s] = %d, want %d (all: %v)", k, st.States[k], v, st.States)
		}
	}
	if len(st.States) != 4 {
		t.Errorf("States = %v, want the four states", st.States)
	}
	if st.Kinds[stage.KindNotification] != 9 || len(st.Kinds) != 1 {
		t.Errorf("Kinds = %v, want notification: 9", st.Kinds)
	}
	wantDL := []outboxfeed.TypeCount{{Type: "order.updated", SchemaVersion: 1, Count: 2}, {Type: "invoice.paid", SchemaVersion: 2, Count: 1}}
	if !slices.Equal(st.DeadLetters, wantDL) {
		t.Errorf("DeadLetters = %+v, want %+v", st.DeadLetters, wantDL)
	}
	// The head of the line: the first pending record by seq (the one
	// waiting for its retry) is older than the processing one.
	if oldest := storetest.MustGet(t, f.s, f.r).OccurredAt; !st.OldestPending.Equal(oldest) {
		t.Errorf("OldestPending = %v, want %v", st.OldestPending, oldest)
	}
	if st.Now.IsZero() || st.OldestPendingAge < 0 || st.OldestPendingAge != max(0, st.Now.Sub(st.OldestPending)) {
		t.Errorf("Now = %v, OldestPendingAge = %v", st.Now, st.OldestPendingAge)
	}

	// Store.Stats agrees on the backlog.
	ss, err := f.s.Stats(context.Background())
	testenv.Must(t, err, "store stats")
	if ss.Pending != 3 || ss.DeadLetter != 3 {
		t.Errorf("store stats: pending %d, dead letters %d; want 3, 3", ss.Pending, ss.DeadLetter)
	}
}

func TestPostgresAdminStatsEmpty(t *testing.T) {
	s, _ := newPGStore(t, Config{})
	st, err := s.Admin().Stats(context.Background())
	testenv.Must(t, err, "stats")
	for k, v := range st.States {
		if v != 0 {
			t.Errorf("States[%s] = %d on an empty outbox", k, v)
		}
	}
	if !st.OldestPending.IsZero() || st.OldestPendingAge != 0 || len(st.DeadLetters) != 0 || len(st.Kinds) != 0 {
		t.Errorf("empty outbox: %+v", st)
	}
}

func TestPostgresAdminList(t *testing.T) {
	f := newPGAdminFixture(t)
	ctx := context.Background()

	all, err := f.a.List(ctx, outboxfeed.Filter{})
	testenv.Must(t, err, "list all")
	if got := listIDs(all); !slices.Equal(got, f.all) {
		t.Fatalf("list all = %v, want %v (every record once, in seq order)", got, f.all)
	}
	if !slices.IsSortedFunc(all.Records, func(a, b outboxfeed.Record) int { return int(a.Seq - b.Seq) }) || all.Next != 0 {
		t.Fatalf("list all: not in seq order or Next = %d", all.Next)
	}

	cases := []struct {
		name string
		f    outboxfeed.Filter
		want []string
	}{
		{"dead letters", outboxfeed.Filter{State: outboxfeed.StateDeadLetter}, f.dl},
		{"pending", outboxfeed.Filter{State: outboxfeed.StatePending}, []string{f.r, f.q}},
		{"processing", outboxfeed.Filter{State: outboxfeed.StateProcessing}, []string{f.p}},
		{"dispatched", outboxfeed.Filter{State: outboxfeed.StateDispatched}, append(append([]string{}, f.ok...), f.h)},
		{"channel", outboxfeed.Filter{Channel: "dl/2"}, []string{f.dl[1]}},
		{"channel and state", outboxfeed.Filter{Channel: "dl/2", State: outboxfeed.StatePending}, nil},
		{"type", outboxfeed.Filter{Type: "invoice.paid"}, []string{f.dl[2]}},
		{"tenant", outboxfeed.Filter{Tenant: "other"}, nil},
	}
	for _, c := range cases {
		p, err := f.a.List(ctx, c.f)
		testenv.Must(t, err, "list "+c.name)
		if got := listIDs(p); !slices.Equal(got, c.want) {
			t.Errorf("list %s = %v, want %v", c.name, got, c.want)
		}
	}

	// The lifecycle columns come from the view.
	p, err := f.a.List(ctx, outboxfeed.Filter{State: outboxfeed.StateDeadLetter, Limit: 1})
	testenv.Must(t, err, "list one dead letter")
	if dl, ok := p.Records[0].State.(outboxfeed.DeadLetter); !ok || dl.Reason != "boom" || dl.Attempts != 1 || dl.At.IsZero() {
		t.Errorf("dead letter state = %#v", p.Records[0].State)
	}
	p, err = f.a.List(ctx, outboxfeed.Filter{State: outboxfeed.StateProcessing})
	testenv.Must(t, err, "list processing")
	if pr, ok := p.Records[0].State.(outboxfeed.Processing); !ok || pr.LeaseOwner != "holder" || pr.Fence == 0 {
		t.Errorf("processing state = %#v", p.Records[0].State)
	}
	p, err = f.a.List(ctx, outboxfeed.Filter{Channel: "retry/1"})
	testenv.Must(t, err, "list retry")
	if pe, ok := p.Records[0].State.(outboxfeed.Pending); !ok || pe.Attempt != 1 || pe.LastError != "try later" {
		t.Errorf("retrying state = %#v", p.Records[0].State)
	}

	// Paging: by seq, each record on exactly one page.
	var paged []string
	after := int64(0)
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		p, err := f.a.List(ctx, outboxfeed.Filter{Limit: 2, After: after})
		testenv.Must(t, err, "list page")
		paged = append(paged, listIDs(p)...)
		if p.Next == 0 {
			break
		}
		after = p.Next
	}
	if !slices.Equal(paged, f.all) {
		t.Errorf("paged = %v, want %v", paged, f.all)
	}

	if _, err := f.a.List(ctx, outboxfeed.Filter{State: "bogus"}); !errors.Is(err, outboxfeed.ErrInvalidRequest) {
		t.Errorf("list with a bad state: %v", err)
	}
}

func TestPostgresAdminReplay(t *testing.T) {
	f := newPGAdminFixture(t)
	ctx := context.Background()
	outboxRows := f.count(t, `SELECT count(*) FROM herald.outbox`)
	missing := "00000000-0000-4000-8000-000000000001"

	res, err := f.a.Replay(ctx, outboxfeed.ReplayRequest{IDs: []string{f.dl[0], f.ok[0], missing}, Actor: "alice", Reason: "fixed the bug"})
	testenv.Must(t, err, "replay")
	if !slices.Equal(res.Replayed, []string{f.dl[0]}) {
		t.Fatalf("replayed = %v, want [%s]", res.Replayed, f.dl[0])
	}
	wantSkip := map[string]string{f.ok[0]: outboxfeed.StateDispatched, missing: ""}
	if len(res.Skipped) != 2 {
		t.Fatalf("skipped = %+v", res.Skipped)
	}
	for _, sk := range res.Skipped {
		st, ok := wantSkip[sk.ID]
		if !ok || sk.State != st || sk.Reason == "" {
			t.Errorf("skip %+v, want state %q", sk, st)
		}
	}

	r := storetest.MustGet(t, f.s, f.dl[0])
	pe, ok := r.State.(outboxfeed.Pending)
	if !ok || pe.Attempt != 0 || pe.LastError != "" || r.Attempt != 0 {
		t.Fatalf("replayed record: state %#v, attempt %d", r.State, r.Attempt)
	}
	if r.ID != f.dl[0] || r.Channel != "dl/1" || !storetest.JSONEqual(t, r.Payload, json.RawMessage(`{"n":1}`)) {
		t.Fatalf("replayed record changed: %+v", r)
	}
	if n := f.count(t, `SELECT count(*) FROM herald.outbox_retry WHERE id = $1::uuid AND state = 'pending'
		AND dead_lettered_at IS NULL AND last_error IS NULL AND next_attempt_at <= now()`, f.dl[0]); n != 1 {
		t.Fatalf("retry-queue row of the replayed record: %d pending rows", n)
	}
	entries, err := f.a.Replays(ctx, f.dl[0])
	testenv.Must(t, err, "replays")
	if len(entries) != 1 || entries[0].Actor != "alice" || entries[0].Reason != "fixed the bug" ||
		entries[0].Failure != "boom" || entries[0].MessageID != f.dl[0] || entries[0].At.IsZero() {
		t.Fatalf("replay audit = %+v", entries)
	}
	if entries, err := f.a.Replays(ctx, f.ok[0]); err != nil || len(entries) != 0 {
		t.Fatalf("replays of a record never replayed = %+v, %v", entries, err)
	}

	// Replaying again: it is no dead letter any more.
	res, err = f.a.Replay(ctx, outboxfeed.ReplayRequest{IDs: []string{f.dl[0]}, Actor: "alice", Reason: "again"})
	testenv.Must(t, err, "replay again")
	if len(res.Replayed) != 0 || len(res.Skipped) != 1 || res.Skipped[0].State != outboxfeed.StatePending {
		t.Fatalf("replay of a pending record: %+v", res)
	}

	// By type, one record per transaction.
	res, err = f.a.Replay(ctx, outboxfeed.ReplayRequest{Type: "order.updated", SchemaVersion: 1, Actor: "bob", Reason: "bulk", BatchSize: 1})
	testenv.Must(t, err, "replay by type")
	if !slices.Equal(res.Replayed, []string{f.dl[1]}) || len(res.Skipped) != 0 {
		t.Fatalf("replay by type: %+v", res)
	}
	st, err := f.a.Stats(ctx)
	testenv.Must(t, err, "stats")
	if st.States[outboxfeed.StateDeadLetter] != 1 || st.States[outboxfeed.StatePending] != 4 {
		t.Fatalf("after replays: %v", st.States)
	}
	if f.count(t, `SELECT count(*) FROM herald.outbox`) != outboxRows {
		t.Fatal("replay changed herald.outbox")
	}

	// The Worker's next claim takes the replayed records, which then go out
	// (once the fixture's open batch, which may hold their partition, is
	// completed).
	held, _, err := f.s.Complete(ctx, f.pb, make([]outboxfeed.Outcome, len(f.pb.Records)), nil)
	testenv.Must(t, err, "complete the open batch")
	if !held {
		t.Fatal("the fixture's open batch lost its lease")
	}
	pgAdminDrive(t, f.s, nil)
	for _, id := range f.dl[:2] {
		d, ok := storetest.StateOf(t, f.s, id).(outboxfeed.Dispatched)
		if !ok || d.Attempt != 0 {
			t.Errorf("replayed %s after a claim: %#v", id, storetest.StateOf(t, f.s, id))
		}
	}

	if _, err := f.a.Replay(ctx, outboxfeed.ReplayRequest{IDs: []string{f.dl[2]}, Reason: "no actor"}); !errors.Is(err, outboxfeed.ErrInvalidRequest) {
		t.Errorf("replay without an actor: %v", err)
	}
}

func TestPostgresAdminPurge(t *testing.T) {
	f := newPGAdminFixture(t)
	ctx := context.Background()
	outboxRows := f.count(t, `SELECT count(*) FROM herald.outbox`)

	// Nothing is an hour old.
	res, err := f.a.Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StateDeadLetter, OlderThan: time.Hour, DryRun: true})
	testenv.Must(t, err, "purge dry run, an hour")
	if res.Deleted != 0 || res.Batches != 0 || res.Cutoff.IsZero() {
		t.Fatalf("dry run older than an hour: %+v", res)
	}
	res, err = f.a.Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StateDeadLetter, DryRun: true})
	testenv.Must(t, err, "purge dry run")
	if res.Deleted != 3 || res.Batches != 0 {
		t.Fatalf("dry run: %+v, want 3 would be deleted", res)
	}
	if n := f.count(t, `SELECT count(*) FROM herald.outbox_retry WHERE state = 'dead_letter'`); n != 3 {
		t.Fatalf("dry run deleted: %d dead letters left", n)
	}

	// By type first, then the rest in batches of two.
	res, err = f.a.Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StateDeadLetter, Type: "invoice.paid"})
	testenv.Must(t, err, "purge by type")
	if res.Deleted != 1 {
		t.Fatalf("purge by type: %+v", res)
	}
	res, err = f.a.Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StateDeadLetter, BatchSize: 2})
	testenv.Must(t, err, "purge")
	if res.Deleted != 2 || res.Batches != 2 {
		t.Fatalf("purge: %+v, want 2 deleted in 2 batches", res)
	}
	if n := f.count(t, `SELECT count(*) FROM herald.outbox_retry WHERE state = 'dead_letter'`); n != 0 {
		t.Fatalf("%d dead letters left", n)
	}
	st, err := f.a.Stats(ctx)
	testenv.Must(t, err, "stats")
	if st.States[outboxfeed.StateDeadLetter] != 0 || len(st.DeadLetters) != 0 {
		t.Fatalf("after the purge: %v %v", st.States, st.DeadLetters)
	}
	p, err := f.a.List(ctx, outboxfeed.Filter{State: outboxfeed.StateDeadLetter})
	testenv.Must(t, err, "list dead letters")
	if len(p.Records) != 0 {
		t.Fatalf("dead letters listed after the purge: %v", listIDs(p))
	}

	// outboxfeed.Dispatched: only the retry-queue row of the record that was held.
	res, err = f.a.Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StateDispatched})
	testenv.Must(t, err, "purge dispatched")
	if res.Deleted != 1 || res.Batches != 1 {
		t.Fatalf("purge dispatched: %+v, want the one retry-queue row", res)
	}
	if n := f.count(t, `SELECT count(*) FROM herald.outbox_retry WHERE id = $1::uuid`, f.h); n != 0 {
		t.Fatalf("retry-queue row of %s not deleted", f.h)
	}

	// The purged records' rows left herald.outbox with them (3 dead
	// letters, 1 held then dispatched), so none of them reappears; the
	// rest is left to segment retention, and pending work is intact.
	if n := f.count(t, `SELECT count(*) FROM herald.outbox`); n != outboxRows-4 {
		t.Fatalf("herald.outbox has %d rows after purging 4 records, had %d", n, outboxRows)
	}
	for _, id := range append([]string{f.h}, f.dl...) {
		if _, err := f.s.Get(ctx, id); !errors.Is(err, outboxfeed.ErrNotFound) {
			t.Errorf("purged %s: Get err = %v, want ErrNotFound", id, err)
		}
	}
	for _, id := range []string{f.r, f.q} {
		if _, ok := storetest.StateOf(t, f.s, id).(outboxfeed.Pending); !ok {
			t.Errorf("%s after the purge: %#v", id, storetest.StateOf(t, f.s, id))
		}
	}
	if _, ok := storetest.StateOf(t, f.s, f.p).(outboxfeed.Processing); !ok {
		t.Errorf("processing record after the purge: %#v", storetest.StateOf(t, f.s, f.p))
	}

	if _, err := f.a.Purge(ctx, outboxfeed.PurgeRequest{State: outboxfeed.StatePending}); !errors.Is(err, outboxfeed.ErrInvalidRequest) {
		t.Errorf("purge of pending records: %v", err)
	}
}
