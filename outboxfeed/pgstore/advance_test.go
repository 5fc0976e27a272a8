package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/storetest"
)

// TestPostgresAdvanceKeepsTheLease: a completion whose next claim names
// the batch's partition, once the batch ended its range with every record
// done, keeps the lease under a new fence and reads the records committed
// since, in one statement (pgAdvanceSQL); the batch log and the records'
// states follow as for a completion and a claim. A record committed out of
// order (in progress when the range ended) is read then, once. When nothing
// came, the lease goes back. The old fence completes nothing, a partition
// with a retry queue takes the general path, and a lease taken over after
// its expiry is refused.
func TestPostgresAdvanceKeepsTheLease(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	part := partitionOf(t, s, "acme", "A")
	if partitionOf(t, s, "acme", "B") != part {
		t.Fatal("channels A and B are in different partitions; the test wants them in one")
	}
	req := outboxfeed.ClaimRequest{Owner: "w", Partition: part, Limit: 100, Lease: time.Minute}
	done := func(b *outboxfeed.Batch) []outboxfeed.Outcome { return make([]outboxfeed.Outcome, len(b.Records)) }
	ids := func(b *outboxfeed.Batch) string {
		var out []string
		for _, r := range b.Records {
			out = append(out, r.ID)
		}
		return fmt.Sprint(out)
	}
	leaseOf := func() (owner *string, fence int64, open bool) {
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT owner, fence, open FROM herald.outbox_partition
			WHERE handler = 'realtime' AND part = $1`, part).Scan(&owner, &fence, &open), "read the lease")
		return owner, fence, open
	}
	batches := func() (n, records int) {
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*), coalesce(sum(records), 0) FROM herald.outbox_batch
			WHERE handler = 'realtime' AND part = $1`, part).Scan(&n, &records), "read the batch log")
		return n, records
	}

	first := pgStage(t, s, storetest.Note("A", `{"n":1}`), storetest.Note("B", `{"n":1}`))
	b, err := s.Claim(ctx, req)
	testenv.Must(t, err, "claim")
	if b == nil || ids(b) != fmt.Sprint(first) {
		t.Fatalf("first batch = %+v, want %v", b, first)
	}
	// In progress while the first range ends: read by the range after.
	late, lateIDs := openStage(t, s, storetest.Note("A", `{"n":2}`))
	second := pgStage(t, s, storetest.Note("B", `{"n":2}`))

	held, nb, err := s.Complete(ctx, b, done(b), &req)
	testenv.Must(t, err, "complete and go on")
	if !held || nb == nil || ids(nb) != fmt.Sprint(second) {
		t.Fatalf("went on: held %v, batch %+v, want the records %v", held, nb, second)
	}
	if owner, fence, open := leaseOf(); owner == nil || *owner != "w" || fence != b.Fence+1 || nb.Fence != fence || !open {
		t.Fatalf("lease after going on: owner %v fence %d open %v, batch fence %d; want w, %d, open", owner, fence, open, nb.Fence, b.Fence+1)
	}
	if n, records := batches(); n != 1 || records != 2 {
		t.Fatalf("batch log after the first batch: %d batches of %d records, want 1 of 2", n, records)
	}
	for _, id := range first {
		if _, ok := storetest.StateOf(t, s, id).(outboxfeed.Dispatched); !ok {
			t.Fatalf("record %s of the completed batch is %T", id, storetest.StateOf(t, s, id))
		}
	}
	if p, ok := storetest.StateOf(t, s, second[0]).(outboxfeed.Processing); !ok || p.Fence != nb.Fence {
		t.Fatalf("record of the batch gone on with: %+v", storetest.StateOf(t, s, second[0]))
	}
	// The batch of the old fence completes nothing more.
	if held, _, err := s.Complete(ctx, b, done(b), nil); err != nil || held {
		t.Fatalf("completing under the old fence: held %v, err %v", held, err)
	}

	testenv.Must(t, late.Commit(ctx), "commit the late record")
	held, nb2, err := s.Complete(ctx, nb, done(nb), &req)
	testenv.Must(t, err, "complete and go on again")
	if !held || nb2 == nil || ids(nb2) != fmt.Sprint(lateIDs) {
		t.Fatalf("went on again: held %v, batch %+v, want the late record %v", held, nb2, lateIDs)
	}

	// Nothing came: the lease goes back with the batch completed.
	held, nb3, err := s.Complete(ctx, nb2, done(nb2), &req)
	testenv.Must(t, err, "complete with nothing to go on with")
	if !held || nb3 != nil {
		t.Fatalf("nothing to go on with: held %v, batch %+v", held, nb3)
	}
	if owner, _, open := leaseOf(); owner != nil || open {
		t.Fatalf("lease after a quiet range: owner %v open %v, want given back", owner, open)
	}
	if n, records := batches(); n != 3 || records != 4 {
		t.Fatalf("batch log: %d batches of %d records, want 3 of 4", n, records)
	}
	for _, id := range append(append(first, second...), lateIDs...) {
		if _, ok := storetest.StateOf(t, s, id).(outboxfeed.Dispatched); !ok {
			t.Fatalf("record %s is %T, want dispatched", id, storetest.StateOf(t, s, id))
		}
	}

	// A retry queue: the general path, which hands out its head first.
	third := pgStage(t, s, storetest.Note("A", `{"n":3}`), storetest.Note("B", `{"n":3}`))
	b, err = s.Claim(ctx, req)
	testenv.Must(t, err, "claim")
	if b == nil || ids(b) != fmt.Sprint(third) {
		t.Fatalf("third batch = %+v, want %v", b, third)
	}
	_, err = s.Pool().Exec(ctx, `INSERT INTO herald.outbox_retry (handler, id, seq, xid, rec_part, part, tenant_id, channel, type,
			schema_version, payload, freshness, occurred_at, kind, state, attempt, next_attempt_at)
		SELECT 'realtime', o.id, o.seq, o.xid, o.part, o.part, o.tenant_id, 'C', o.type, o.schema_version, o.payload, o.freshness,
			o.occurred_at, o.kind, 'pending', 1, now()
		FROM herald.outbox o WHERE o.id = $1::uuid`, first[0])
	testenv.Must(t, err, "queue a retry")
	held, nb, err = s.Complete(ctx, b, done(b), &req)
	testenv.Must(t, err, "complete beside a retry queue")
	if !held || nb == nil || len(nb.Records) != 1 || nb.Records[0].Queued == 0 {
		t.Fatalf("beside a retry queue: held %v, batch %+v, want its queued record", held, nb)
	}
	_, err = s.Pool().Exec(ctx, `DELETE FROM herald.outbox_retry`)
	testenv.Must(t, err, "empty the retry queue")

	// A lease taken over after it expired: the holder's advance is refused
	// and changes nothing.
	held, nb, err = s.Complete(ctx, nb, done(nb), nil)
	if err != nil || !held || nb != nil {
		t.Fatalf("complete the queued record: held %v, batch %+v, err %v", held, nb, err)
	}
	fourth := pgStage(t, s, storetest.Note("A", `{"n":4}`), storetest.Note("B", `{"n":4}`))
	short := req
	short.Lease = time.Millisecond
	b, err = s.Claim(ctx, short)
	testenv.Must(t, err, "claim with a short lease")
	if b == nil || ids(b) != fmt.Sprint(fourth) {
		t.Fatalf("fourth batch = %+v, want %v", b, fourth)
	}
	time.Sleep(5 * time.Millisecond) // the lease runs out
	other := req
	other.Owner = "v"
	tb, err := s.Claim(ctx, other)
	testenv.Must(t, err, "take over")
	if tb == nil || !tb.Takeover {
		t.Fatalf("takeover = %+v", tb)
	}
	logged, _ := batches()
	held, nb, err = s.Complete(ctx, b, done(b), &short)
	if err != nil || held || nb != nil {
		t.Fatalf("advance after a takeover: held %v, batch %+v, err %v", held, nb, err)
	}
	if owner, fence, _ := leaseOf(); owner == nil || *owner != "v" || fence != tb.Fence {
		t.Fatalf("lease after a refused advance: owner %v fence %d, want v's %d", owner, fence, tb.Fence)
	}
	if n, _ := batches(); n != logged {
		t.Fatalf("a refused advance logged a batch (%d, before %d)", n, logged)
	}
}
