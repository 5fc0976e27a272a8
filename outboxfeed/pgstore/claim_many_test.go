package pgstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/heraldgw/herald/outboxfeed/storetest"
)

// A claim of several partitions leases a partition in the common state
// and reads its range in the same statement (pgClaimManySQL): the
// records of a transaction that was open when the partition's range
// began (in the xip of its lo) and committed since come in that claim,
// and so do those of the transactions that began later.
func TestPostgresClaimManyReadsTransactionsOpenAtTheRangesStart(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	notes := func(tag string) []stage.Notification {
		var ns []stage.Notification
		for i := range 12 {
			ns = append(ns, storetest.Note(fmt.Sprintf("c/%d", i), fmt.Sprintf(`{%q:%d}`, tag, i)))
		}
		return ns
	}
	req := outboxfeed.ClaimRequest{Owner: "claim-many-test", Partition: outboxfeed.AnyPartition, Limit: 100,
		Lease: time.Minute, Spread: 64}
	claimAll := func(what string) []string {
		t.Helper()
		_, bs, err := s.CompleteMany(ctx, nil, &req)
		testenv.Must(t, err, "claim "+what)
		var cs []outboxfeed.Completion
		var got []string
		for _, b := range bs {
			if b.More {
				t.Fatalf("claim %s: partition %d holds more than a batch", what, b.Partition)
			}
			out := make([]outboxfeed.Outcome, len(b.Records))
			for _, r := range b.Records {
				got = append(got, r.ID)
			}
			cs = append(cs, outboxfeed.Completion{Batch: b, Out: out})
		}
		held, _, err := s.CompleteMany(ctx, cs, nil)
		testenv.Must(t, err, "complete "+what)
		for i, h := range held {
			if !h {
				t.Fatalf("complete %s: lost the lease of partition %d", what, cs[i].Batch.Partition)
			}
		}
		slices.Sort(got)
		return got
	}
	open, openIDs := openStage(t, s, notes("open")...)
	before := pgStage(t, s, notes("before")...)
	slices.Sort(before)
	// Each partition's range now ends at a snapshot in which open runs.
	if got := claimAll("the records before"); !slices.Equal(got, before) {
		t.Fatalf("first claim read %v, want %v", got, before)
	}
	testenv.Must(t, open.Commit(ctx), "commit the open transaction")
	// One partition's range starts after it, and that partition comes
	// first in the next claim: the claim reads each partition's range from
	// its own start.
	_, err := s.Pool().Exec(ctx, `UPDATE herald.outbox_partition SET lo = pg_current_snapshot(), claimed_at = '2000-01-01'
		WHERE part = (SELECT min(part) FROM herald.outbox_partition)`)
	testenv.Must(t, err, "move the first partition's start past the open transaction")
	var skipped []string
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT coalesce(array_agg(id::text), '{}') FROM herald.outbox
		WHERE part = (SELECT min(part) FROM herald.outbox_partition)`).Scan(&skipped), "records before the moved start")
	after := pgStage(t, s, notes("after")...)
	want := slices.Concat(openIDs, after)
	want = slices.DeleteFunc(want, func(id string) bool { return slices.Contains(skipped, id) && !slices.Contains(after, id) })
	slices.Sort(want)
	if got := claimAll("the records of the transaction open at the range's start"); !slices.Equal(got, want) {
		t.Fatalf("second claim read %d records %v, want %d %v", len(got), got, len(want), want)
	}
	var held int
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM herald.outbox_partition WHERE owner IS NOT NULL`).Scan(&held), "leases")
	if held != 0 {
		t.Fatalf("%d partitions still leased after every batch completed", held)
	}
}

// Completions of several partitions that go on advance them in one
// statement (pgAdvanceSQL), each as it would be alone: two
// partitions with new records go on with exactly those, in order, each
// batch logged with its own fence, records and last seq; one whose lease
// was taken meanwhile changes nothing and is reported lost; one with a
// record waiting in its retry queue takes the general path.
func TestPostgresAdvancesOfSeveralPartitionsInOneStatement(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	pool := s.Pool()
	partOf := func(ch string) int {
		var p int
		testenv.Must(t, pool.QueryRow(ctx, `SELECT herald.outbox_partition_of('acme', $1)`, ch).Scan(&p), "partition of")
		return p
	}
	// A channel of each partition, and one more of A and B for the
	// second round.
	chans := map[int][]string{}
	for i := 0; len(chans) < 4 || len(chans[0]) < 2 || len(chans[1]) < 2 || len(chans[2]) < 2 || len(chans[3]) < 2; i++ {
		ch := fmt.Sprintf("adv/%d", i)
		chans[partOf(ch)] = append(chans[partOf(ch)], ch)
	}
	stageIn := func(tag string, parts ...int) map[int][]string {
		ids := map[int][]string{}
		for _, p := range parts {
			for _, ch := range chans[p][:2] {
				ids[p] = append(ids[p], storetest.StagePgx(t, pool, true, storetest.Note(ch, fmt.Sprintf(`{%q:true}`, tag)))...)
			}
		}
		return ids
	}
	first := stageIn("first", 0, 1, 2, 3)
	req := outboxfeed.ClaimRequest{Owner: "advance-many", Partition: outboxfeed.AnyPartition, Limit: 100,
		Lease: time.Minute, Spread: 64}
	_, bs, err := s.CompleteMany(ctx, nil, &req)
	testenv.Must(t, err, "claim every partition")
	byPart := map[int]*outboxfeed.Batch{}
	for _, b := range bs {
		byPart[b.Partition] = b
		if got := storetest.BatchIDs(b); fmt.Sprint(got) != fmt.Sprint(first[b.Partition]) {
			t.Fatalf("partition %d: claimed %v, want %v", b.Partition, got, first[b.Partition])
		}
	}
	if len(byPart) != 4 {
		t.Fatalf("claimed partitions %v, want all 4", byPart)
	}

	// Partitions 0 and 1 receive records; 2 loses its lease; 3 gets a
	// record in its retry queue, due later.
	second := stageIn("second", 0, 1)
	_, err = pool.Exec(ctx, `UPDATE herald.outbox_partition SET fence = fence + 1 WHERE handler = 'realtime' AND part = 2`)
	testenv.Must(t, err, "take partition 2's lease")
	_, err = pool.Exec(ctx, `INSERT INTO herald.outbox_retry (id, seq, part, tenant_id, channel, type, schema_version, payload,
		freshness, occurred_at, kind, state, next_attempt_at, handler)
		VALUES (gen_random_uuid(), 0, 3, 'acme', 'adv/queued', 'order.updated', 1, '{}', '{"mode":"immediate"}', now(),
			'notification', 'pending', now() + interval '1 hour', 'realtime')`)
	testenv.Must(t, err, "queue a retry in partition 3")

	var cs []outboxfeed.Completion
	for p := range 4 {
		b := byPart[p]
		cs = append(cs, outboxfeed.Completion{Batch: b, Out: make([]outboxfeed.Outcome, len(b.Records)), GoOn: true})
	}
	held, nbs, err := s.CompleteMany(ctx, cs, &req)
	testenv.Must(t, err, "complete the four")
	if want := []bool{true, true, false, true}; fmt.Sprint(held) != fmt.Sprint(want) {
		t.Fatalf("held %v, want %v (partition 2's lease was taken)", held, want)
	}
	got := map[int][]string{}
	for _, b := range nbs {
		if b.Partition == 0 || b.Partition == 1 {
			got[b.Partition] = storetest.BatchIDs(b)
		}
		for _, r := range b.Records {
			if slices.Contains(first[b.Partition], r.ID) {
				t.Fatalf("partition %d: record %s came again", b.Partition, r.ID)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(second) {
		t.Fatalf("went on with %v, want %v", got, second)
	}
	for p := range 2 {
		b := byPart[p]
		var records, toSeq int64
		testenv.Must(t, pool.QueryRow(ctx, `SELECT records, to_seq FROM herald.outbox_batch
			WHERE handler = 'realtime' AND part = $1 AND fence = $2`, p, b.Fence).Scan(&records, &toSeq), "batch log")
		if records != int64(len(b.Records)) || toSeq != b.Records[len(b.Records)-1].Seq {
			t.Fatalf("partition %d: batch logged with %d records up to seq %d, want %d up to %d",
				p, records, toSeq, len(b.Records), b.Records[len(b.Records)-1].Seq)
		}
	}
	// Partition 2 changed nothing: its first records are still pending.
	for _, id := range first[2] {
		if _, ok := storetest.StateOf(t, s, id).(outboxfeed.Dispatched); ok {
			t.Fatalf("%s was completed under a lease that was lost", id)
		}
	}
	for _, p := range []int{0, 1, 3} {
		for _, id := range first[p] {
			if _, ok := storetest.StateOf(t, s, id).(outboxfeed.Dispatched); !ok {
				t.Fatalf("partition %d: %s: %#v, want dispatched", p, id, storetest.StateOf(t, s, id))
			}
		}
	}
}
