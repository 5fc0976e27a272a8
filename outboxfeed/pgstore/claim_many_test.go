package pgstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
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

// With Hold, a step keeps the partitions of a flow: one whose range came
// back empty while another found records stays leased as a batch of no
// records and is read again by the next step's advance; a step that finds
// no records anywhere gives them all back. A step that kept every
// partition and found none free leaves the claim of further partitions
// out of the next one, and a partition that comes free meanwhile (here a
// lease that expired) is claimed by the step after.
func TestPostgresHoldKeepsAFlowsPartitions(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	pool := s.Pool()
	chans := map[int]string{}
	for i := 0; len(chans) < 4; i++ {
		ch := fmt.Sprintf("hold/%d", i)
		var p int
		testenv.Must(t, pool.QueryRow(ctx, `SELECT herald.outbox_partition_of('acme', $1)`, ch).Scan(&p), "partition of")
		if _, ok := chans[p]; !ok {
			chans[p] = ch
		}
	}
	n := 0
	stageIn := func(p int) string {
		n++
		return storetest.StagePgx(t, pool, true, storetest.Note(chans[p], fmt.Sprintf(`{"n":%d}`, n)))[0]
	}
	for p := range 4 {
		stageIn(p)
	}
	hold := outboxfeed.ClaimRequest{Owner: "hold", Partition: outboxfeed.AnyPartition, Limit: 100, Lease: time.Minute, Spread: 3, Hold: true}
	_, bs, err := s.CompleteMany(ctx, nil, &hold)
	testenv.Must(t, err, "claim three partitions")
	other := outboxfeed.ClaimRequest{Owner: "other", Partition: outboxfeed.AnyPartition, Limit: 100, Lease: time.Minute}
	_, obs, err := s.CompleteMany(ctx, nil, &other)
	testenv.Must(t, err, "claim the fourth")
	if len(bs) != 3 || len(obs) != 1 {
		t.Fatalf("claimed %d and %d partitions, want 3 and 1", len(bs), len(obs))
	}
	theirs := obs[0].Partition
	step := func(what string, bs []*outboxfeed.Batch) (map[int][]string, []*outboxfeed.Batch) {
		t.Helper()
		cs := make([]outboxfeed.Completion, len(bs))
		for i, b := range bs {
			cs[i] = outboxfeed.Completion{Batch: b, Out: make([]outboxfeed.Outcome, len(b.Records)), GoOn: true}
		}
		held, nbs, err := s.CompleteMany(ctx, cs, &hold)
		testenv.Must(t, err, what)
		if slices.Contains(held, false) {
			t.Fatalf("%s: held %v", what, held)
		}
		got := map[int][]string{}
		for _, b := range nbs {
			got[b.Partition] = storetest.BatchIDs(b)
		}
		return got, nbs
	}
	mine := make([]int, 0, 3)
	for _, b := range bs {
		mine = append(mine, b.Partition)
	}

	// Records in one of the three: it goes on with them, the other two
	// are kept with nothing, and none is free (the fourth is the other
	// owner's).
	id := stageIn(mine[0])
	got, bs := step("a step with records in one partition", bs)
	want := map[int][]string{mine[0]: {id}, mine[1]: nil, mine[2]: nil}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("went on with %v, want %v", got, want)
	}
	if !s.aloneAt("hold") {
		t.Fatal("a step that kept every partition with none free did not say so")
	}
	fenceOf := func(bs []*outboxfeed.Batch, p int) int64 {
		for _, b := range bs {
			if b.Partition == p {
				return b.Fence
			}
		}
		t.Fatalf("no batch of partition %d", p)
		return 0
	}
	keptFence := fenceOf(bs, mine[2])
	var kept int
	testenv.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM herald.outbox_partition
		WHERE handler = 'realtime' AND owner = 'hold' AND open`).Scan(&kept), "count kept")
	if kept != 3 {
		t.Fatalf("%d partitions leased to the holder, want 3", kept)
	}

	// A record in a kept partition comes with the next step's advance.
	// The other owner's lease expires meanwhile: this step, which claims
	// no further partition, does not take it; it says so, and the next
	// step does.
	_, err = pool.Exec(ctx, `UPDATE herald.outbox_partition SET expires_at = clock_timestamp() - interval '1 second'
		WHERE handler = 'realtime' AND part = $1`, theirs)
	testenv.Must(t, err, "expire the other owner's lease")
	id = stageIn(mine[1])
	got, bs = step("a step with records in a kept partition", bs)
	want = map[int][]string{mine[0]: nil, mine[1]: {id}, mine[2]: nil}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("went on with %v, want %v (no claim of the fourth yet)", got, want)
	}
	if s.aloneAt("hold") {
		t.Fatal("a step that saw a lease expire said no partition was free")
	}
	// Kept empty a second time in a row: left as it was, its fence too.
	if f := fenceOf(bs, mine[2]); f != keptFence {
		t.Fatalf("partition %d kept empty twice: fence %d, then %d; want it left as it was", mine[2], keptFence, f)
	}
	id = stageIn(mine[2])
	got, bs = step("the step after", bs)
	if fmt.Sprint(got[mine[2]]) != fmt.Sprint([]string{id}) || len(got[theirs]) != 1 {
		t.Fatalf("went on with %v, want partition %d's %s and the expired partition %d's record", got, mine[2], id, theirs)
	}

	// A step without records anywhere gives every partition back.
	got, _ = step("a step without records", bs)
	if len(got) != 0 {
		t.Fatalf("went on with %v, want nothing", got)
	}
	testenv.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM herald.outbox_partition
		WHERE handler = 'realtime' AND owner IS NOT NULL`).Scan(&kept), "count leased")
	if kept != 0 {
		t.Fatalf("%d partitions still leased after a step without records", kept)
	}
	if b := storetest.ClaimAny(t, s, "after", 100, time.Minute); b != nil {
		t.Fatalf("a claim after every step found %v", storetest.BatchIDs(b))
	}
}

// A Worker whose first lane holds a flow's partitions (ClaimRequest.Hold)
// delivers a trickle spread over every partition once and in order, and
// gives every partition back once the flow ends: none stays leased.
func TestPostgresHeldPartitionsGoBackWhenTheFlowEnds(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	rec := storetest.NewRecorder()
	storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{PollInterval: 50 * time.Millisecond, IdleAfter: time.Hour})
	const channels, records = 16, 400
	want := map[string][]string{}
	for i := range records {
		ch := fmt.Sprintf("trickle/%d", i%channels)
		id, err := stageOne(ctx, s, storetest.Note(ch, fmt.Sprintf(`{"i":%d}`, i)))
		testenv.Must(t, err, "stage")
		want[ch] = append(want[ch], id)
	}
	rec.WaitFor(t, time.Minute, "every record", func() bool { return rec.Count() >= records })
	for ch, ids := range want {
		if got := rec.Channel(fanout.Key{Tenant: "acme", Channel: ch}); fmt.Sprint(got) != fmt.Sprint(ids) {
			t.Fatalf("%s: published %v, want %v once and in order", ch, got, ids)
		}
	}
	if n := rec.Count(); n != records {
		t.Fatalf("%d publications, want %d", n, records)
	}
	storetest.Eventually(t, time.Minute, "every partition given back", func() bool {
		var leased int
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM herald.outbox_partition
			WHERE handler = 'realtime' AND owner IS NOT NULL`).Scan(&leased), "count leased")
		return leased == 0
	})
}
