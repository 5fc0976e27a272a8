package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/redisbroker"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/heraldgw/herald/outboxfeed/storetest"
)

// A business transaction takes its xid at its first write, often long
// before it stages; a record staged after another transaction committed
// must still follow that transaction's records, even when both commit
// into the same range (the Worker was away). Each pair here: transaction
// A writes a business row, B stages "paid" and commits, then A stages
// "shipped" and commits; the screen must end on "shipped". Checked with
// the range read in one batch, in several, and in runs (a range larger
// than the Worker holds), and with a range larger than the claim's own
// statement reads (read right after it, readRange).
func TestPostgresRangeInStagingOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		batch int
		held  int // RangeRecords
		pairs int
	}{
		{"one batch", 1000, 0, 12},
		{"several batches", 3, 0, 12},
		{"runs", 2, 2, 12},
		{"a backlog read after its claim", 1000, 0, outboxfeed.BacklogRecords},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newPGStore(t, Config{})
			ctx := context.Background()
			_, err := s.Pool().Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY, status text)`)
			testenv.Must(t, err, "business table")
			pairs := tc.pairs
			want := map[fanout.Key][]string{}
			for i := range pairs {
				ch := fmt.Sprintf("orders/%d", i%4)
				a, err := s.Pool().Begin(ctx)
				testenv.Must(t, err, "begin A")
				_, err = a.Exec(ctx, `INSERT INTO orders VALUES ($1, 'paid')`, i)
				testenv.Must(t, err, "A's business write")
				paid := pgStage(t, s, storetest.Note(ch, fmt.Sprintf(`{"order":%d,"status":"paid"}`, i)))
				_, err = a.Exec(ctx, `UPDATE orders SET status = 'shipped' WHERE id = $1`, i)
				testenv.Must(t, err, "A's second write")
				shipped, err := stage.Stage(ctx, a, storetest.Note(ch, fmt.Sprintf(`{"order":%d,"status":"shipped"}`, i)))
				testenv.Must(t, err, "A stages")
				testenv.Must(t, a.Commit(ctx), "commit A")
				k := fanout.Key{Tenant: "acme", Channel: ch}
				want[k] = append(want[k], paid[0], shipped)
			}
			rec := storetest.NewRecorder()
			storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{BatchSize: tc.batch, RangeRecords: tc.held})
			rec.WaitFor(t, 30*time.Second, "every record", func() bool { return rec.Count() >= 2*pairs })
			for k, ids := range want {
				if got := rec.Channel(k); fmt.Sprint(got) != fmt.Sprint(ids) {
					t.Fatalf("%s published %v, want staging order %v", k.Channel, got, ids)
				}
			}
			if n := rec.Count(); n != 2*pairs {
				t.Fatalf("%d publications, want %d", n, 2*pairs)
			}
		})
	}
}

func TestPostgresBatchSmoke(t *testing.T) {
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	var ids []string
	for i := range 50 {
		id, err := stageOne(ctx, s, storetest.Note(fmt.Sprintf("c/%d", i%7), `{"n":1}`))
		testenv.Must(t, err, "stage")
		ids = append(ids, id)
	}
	rec := storetest.NewRecorder()
	storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{BatchSize: 8})
	rec.WaitFor(t, 10*time.Second, "all records", func() bool { return rec.Count() >= 50 })
	for _, id := range ids {
		storetest.EventuallyIn[outboxfeed.Dispatched](t, 5*time.Second, "dispatched", s, id)
	}
	for i := range 7 {
		got := rec.Channel(fanout.Key{Tenant: "acme", Channel: fmt.Sprintf("c/%d", i)})
		if len(got) != len(dedupe(got)) {
			t.Fatalf("channel %d has duplicates: %v", i, got)
		}
	}
	st, err := s.Stats(ctx)
	testenv.Must(t, err, "stats")
	if st.Pending != 0 {
		t.Fatalf("pending = %d", st.Pending)
	}
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// The in-memory and Redis brokers are Publishers as they are.
var (
	_ outboxfeed.Publisher = (*fanout.MemoryBroker)(nil)
	_ outboxfeed.Publisher = (*redisbroker.Broker)(nil)
	_ outboxfeed.Publisher = fanout.Broker(nil)
)

func TestWorkerPublishesToMemoryBroker(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	b, err := fanout.NewMemoryBroker(fanout.MemoryConfig{})
	testenv.Must(t, err, "memory broker")
	defer b.Stop()
	storetest.StartWorker(t, s, b, outboxfeed.WorkerConfig{})
	ctx := context.Background()
	var ids []string
	for i := range 2 {
		id, err := stageOne(ctx, s, storetest.Note("orders/1", fmt.Sprintf(`{"i":%d}`, i)))
		testenv.Must(t, err, "stage")
		ids = append(ids, id)
	}
	for _, id := range ids {
		storetest.EventuallyIn[outboxfeed.Dispatched](t, 5*time.Second, "dispatched", s, id)
	}
	r, err := b.Recover(ctx, fanout.Key{Tenant: "acme", Channel: "orders/1"}, fanout.Position{}, 0)
	testenv.Must(t, err, "recover")
	if r.Top.Offset != 2 {
		t.Fatalf("broker top offset = %d, want 2", r.Top.Offset)
	}
}
