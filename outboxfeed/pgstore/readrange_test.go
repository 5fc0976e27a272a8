package pgstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/heraldgw/herald/outboxfeed/storetest"
	"github.com/jackc/pgx/v5"
)

// allDone is the outcomes of b's records, all published.
func allDone(b *outboxfeed.Batch) []outboxfeed.Outcome {
	out := make([]outboxfeed.Outcome, len(b.Records))
	for i := range out {
		out[i] = outboxfeed.Outcome{Kind: outboxfeed.OutcomeDone}
	}
	return out
}

// dispatchedCount is how many of the realtime handler's records are
// dispatched.
func dispatchedCount(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	err := s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM herald.outbox_records WHERE handler = $1 AND state = 'dispatched'`,
		outboxfeed.RealtimeHandler).Scan(&n)
	testenv.Must(t, err, "count dispatched")
	return n
}

// A range larger than the claim statement reads (claimRangeRecords) is
// read right after the claim, whole, and handed out a batch at a time in
// staging order, every record once: here three transactions stage in
// turn on one channel (their records interleave in seq) and commit in
// reverse order.
func TestPostgresBacklogReadAfterTheClaim(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	const txs, each = 3, 30
	open := make([]pgx.Tx, txs)
	for j := range open {
		tx, err := s.Pool().Begin(ctx)
		testenv.Must(t, err, "begin")
		open[j] = tx
	}
	var want []string
	for i := range each {
		for j, tx := range open {
			id, err := stage.Stage(ctx, tx, storetest.Note("orders/1", fmt.Sprintf(`{"i":%d,"tx":%d}`, i, j)))
			testenv.Must(t, err, "stage")
			want = append(want, id)
		}
	}
	for j := len(open) - 1; j >= 0; j-- {
		testenv.Must(t, open[j].Commit(ctx), "commit")
	}
	req := outboxfeed.ClaimRequest{Owner: "w", Partition: outboxfeed.AnyPartition, Limit: 16, Lease: time.Minute}
	if f := claimRangeRecords(&req); f >= len(want) || len(want) > holdLimit(&req) {
		t.Fatalf("the claim statement reads %d records, the Worker holds %d: want a range of %d between them", f, holdLimit(&req), len(want))
	}
	b, err := s.Claim(ctx, req)
	testenv.Must(t, err, "claim")
	var got []string
	batches := 0
	for b != nil {
		batches++
		if len(b.Records) > req.Limit {
			t.Fatalf("a batch of %d records, limit %d", len(b.Records), req.Limit)
		}
		for _, r := range b.Records {
			got = append(got, r.ID)
		}
		var next *outboxfeed.ClaimRequest
		if b.More {
			n := req
			n.Partition = b.Partition
			next = &n
		}
		held, nb, err := s.Complete(ctx, b, allDone(b), next)
		testenv.Must(t, err, "complete")
		if !held {
			t.Fatal("lease lost")
		}
		b = nb
	}
	if !slices.Equal(got, want) {
		t.Fatalf("handed out %v,\nwant staging order %v", got, want)
	}
	if wantBatches := (len(want) + req.Limit - 1) / req.Limit; batches != wantBatches {
		t.Fatalf("%d batches, want %d", batches, wantBatches)
	}
	if n := dispatchedCount(t, s); n != len(want) {
		t.Fatalf("%d records dispatched, want %d", n, len(want))
	}
}

// The read after the claim is made under the claim's lease: once another
// Worker took the partition over it reads nothing, the batch holds no
// range records, its completion is refused, and the new holder delivers
// the whole range.
func TestPostgresBacklogReadAfterALostLease(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	notes := make([]stage.Notification, 40)
	for i := range notes {
		notes[i] = storetest.Note("orders/1", fmt.Sprintf(`{"i":%d}`, i))
	}
	want := pgStage(t, s, notes...)
	req := outboxfeed.ClaimRequest{Owner: "w", Partition: outboxfeed.AnyPartition, Limit: 16, Lease: time.Minute}
	// The claim statement alone, as Claim sends it.
	var pb pgx.Batch
	pb.Queue(pgCycleSettings, commitMode(false))
	queueClaim(&pb, s.handler, &req)
	res := s.pool.SendBatch(ctx, &pb)
	b, err := readClaim(res, pb.Len(), &req, nil)
	testenv.Must(t, err, "claim")
	testenv.Must(t, res.Close(), "claim")
	if b == nil || !state(b).runs.pending || !state(b).runs.whole || len(b.Records) != 0 {
		t.Fatalf("claim of %d records: want the range left to the read after it, got %+v", len(want), b)
	}
	_, err = s.Pool().Exec(ctx, `UPDATE herald.outbox_partition SET expires_at = clock_timestamp() - interval '1 second'
		WHERE handler = $1 AND part = $2`, outboxfeed.RealtimeHandler, b.Partition)
	testenv.Must(t, err, "expire the lease")
	other, err := s.Claim(ctx, outboxfeed.ClaimRequest{Owner: "other", Partition: b.Partition, Limit: 100, Lease: time.Minute})
	testenv.Must(t, err, "takeover")
	if other == nil || len(other.Records) != len(want) {
		t.Fatalf("takeover: %+v, want %d records", other, len(want))
	}
	testenv.Must(t, s.readRuns(ctx, b, &req), "read after the claim")
	if len(b.Records) != 0 || b.More {
		t.Fatalf("read under a lost lease: %d records, more %v; want none", len(b.Records), b.More)
	}
	held, _, err := s.Complete(ctx, b, nil, nil)
	testenv.Must(t, err, "complete the lost batch")
	if held {
		t.Fatal("a batch whose lease was taken over completed")
	}
	for i, r := range other.Records {
		if r.ID != want[i] {
			t.Fatalf("record %d of the takeover is %s, want %s", i, r.ID, want[i])
		}
	}
	held, _, err = s.Complete(ctx, other, allDone(other), nil)
	testenv.Must(t, err, "complete")
	if !held {
		t.Fatal("the new holder lost its lease")
	}
	if n := dispatchedCount(t, s); n != len(want) {
		t.Fatalf("%d records dispatched, want %d", n, len(want))
	}
}

// firstClaimStore records the first claim request of each lease owner.
type firstClaimStore struct {
	*Store
	mu    sync.Mutex
	first map[string]outboxfeed.ClaimRequest
}

func (s *firstClaimStore) note(req outboxfeed.ClaimRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.first[req.Owner]; !ok {
		s.first[req.Owner] = req
	}
}

func (s *firstClaimStore) Claim(ctx context.Context, req outboxfeed.ClaimRequest) (*outboxfeed.Batch, error) {
	s.note(req)
	return s.Store.Claim(ctx, req)
}

func (s *firstClaimStore) CompleteMany(ctx context.Context, cs []outboxfeed.Completion, next *outboxfeed.ClaimRequest) ([]bool, []*outboxfeed.Batch, error) {
	if next != nil {
		s.note(*next)
	}
	return s.Store.CompleteMany(ctx, cs, next)
}

// A backlog staged while no Worker ran is claimed a partition a lane: the
// lead lane's first claim takes one partition, as the other lanes' do,
// rather than every partition with records (read one after another by
// one lane while the others find nothing), and every record is published
// once, in staging order on its channel.
func TestPostgresBacklogAtStartSpreadsOverTheLanes(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	want := map[fanout.Key][]string{}
	total := 0
	for tx := range 4 {
		notes := make([]stage.Notification, 300)
		for i := range notes {
			notes[i] = storetest.Note(fmt.Sprintf("orders/%d", i%40), fmt.Sprintf(`{"tx":%d,"i":%d}`, tx, i))
		}
		for i, id := range pgStage(t, s, notes...) {
			k := fanout.Key{Tenant: "acme", Channel: notes[i].Channel}
			want[k] = append(want[k], id)
			total++
		}
	}
	parts := map[int]bool{}
	for k := range want {
		parts[partitionOf(t, s, k.Tenant, k.Channel)] = true
	}
	if len(parts) < 2 {
		t.Fatalf("the backlog is in %d partition(s): want several", len(parts))
	}
	fs := &firstClaimStore{Store: s, first: map[string]outboxfeed.ClaimRequest{}}
	rec := storetest.NewRecorder()
	storetest.StartWorker(t, fs, rec, outboxfeed.WorkerConfig{Owner: "w", Lanes: 4, BatchSize: 50})
	rec.WaitFor(t, 30*time.Second, "every record", func() bool { return rec.Count() >= total })
	fs.mu.Lock()
	lead, ok := fs.first["w"]
	fs.mu.Unlock()
	if !ok || lead.Spread > 1 {
		t.Fatalf("the lead lane's first claim: %+v (claimed %v), want one partition", lead, ok)
	}
	for k, ids := range want {
		if got := rec.Channel(k); !slices.Equal(got, ids) {
			t.Fatalf("%s published %v, want %v", k.Channel, got, ids)
		}
	}
	if n := rec.Count(); n != total {
		t.Fatalf("%d publications, want %d", n, total)
	}
}
