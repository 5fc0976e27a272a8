package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
)

// heldBatchSizes are the batch sizes the held-channel tests run with: the
// smallest the Worker allows, a few small ones where a channel's queue
// exceeds a batch quickly, and a larger one.
var heldBatchSizes = []int{1, 2, 7, 64}

// stageHeld stages n records of channel a in three transactions,
// interleaved with records of two other channels, and returns the ids of
// a's records and of the others', in staging order.
func stageHeld(t *testing.T, h *Harness, a string, n int) (held []string, others map[fanout.Key][]string) {
	t.Helper()
	others = map[fanout.Key][]string{}
	per := (n + 2) / 3
	for tx := 0; len(held) < n; tx++ {
		var ns []stage.Notification
		for i := 0; i < per && len(held)+len(ns) < n; i++ {
			ns = append(ns, Note(a, fmt.Sprintf(`{"tx":%d,"i":%d}`, tx, i)))
		}
		other := fmt.Sprintf("orders/other%d", tx%2)
		ns = append(ns, Note(other, fmt.Sprintf(`{"tx":%d}`, tx)))
		ids := h.Stage(t, true, ns...)
		held = append(held, ids[:len(ids)-1]...)
		k := fanout.Key{Tenant: "acme", Channel: other}
		others[k] = append(others[k], ids[len(ids)-1])
	}
	return held, others
}

// checkDelivered waits until every channel got exactly its records, in
// order, and every record is dispatched.
func checkDelivered(t *testing.T, h *Harness, rec *Recorder, want map[fanout.Key][]string) {
	t.Helper()
	total := 0
	for _, ids := range want {
		total += len(ids)
	}
	rec.WaitFor(t, 30*time.Second, fmt.Sprintf("all %d records", total), func() bool { return rec.Count() >= total })
	for k, ids := range want {
		got := rec.Channel(k)
		if len(got) != len(ids) {
			t.Fatalf("%s: %d publications, want %d", k.Channel, len(got), len(ids))
		}
		for i := range ids {
			if got[i] != ids[i] {
				t.Fatalf("%s: publication %d is %s, want %s (order or duplicate)", k.Channel, i, got[i], ids[i])
			}
		}
	}
	if n := rec.Count(); n != total {
		t.Fatalf("%d publications, want %d", n, total)
	}
	for _, ids := range want {
		for _, id := range ids {
			Eventually(t, 10*time.Second, "record "+id+" dispatched", func() bool {
				_, ok := StateOf(t, h.Store, id).(outboxfeed.Dispatched)
				return ok
			})
		}
	}
}

// A broker outage holds every record the Worker claims, so one channel's
// retry queue grows past a batch: once the broker is back, the channel is
// published again, a batch at a time, in order.
func testHeldPastABatchOutage(t *testing.T, h *Harness) {
	for _, size := range heldBatchSizes {
		t.Run(fmt.Sprintf("batch%d", size), func(t *testing.T) {
			a := fmt.Sprintf("orders/held%d", size)
			rec, down := FailingRecorder(ErrBrokerDown)
			StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{BatchSize: size, OutageMaxDelay: quickOutageRetry})
			n := 3*size + 2
			held, want := stageHeld(t, h, a, n)
			ka := fanout.Key{Tenant: "acme", Channel: a}
			want[ka] = held
			Eventually(t, 30*time.Second, "every record of the channel held in its retry queue", func() bool {
				return h.Queued(t, ka) == n
			})
			down.Store(false)
			checkDelivered(t, h, rec, want)

		})
	}
}

// A record that fails holds back its channel while more than a batch of
// the channel's records arrive: once it is due, the channel goes on, a
// batch at a time, in order.
func testHeldPastABatchRetry(t *testing.T, h *Harness) {
	for _, size := range heldBatchSizes {
		t.Run(fmt.Sprintf("batch%d", size), func(t *testing.T) {
			a := fmt.Sprintf("orders/retry%d", size)
			ka := fanout.Key{Tenant: "acme", Channel: a}
			var failed atomic.Bool
			rec := NewRecorder()
			rec.Before = func(_ context.Context, msg fanout.Message) error {
				if msg.Key == ka && failed.CompareAndSwap(false, true) {
					return outboxfeed.Retryable(errors.New("target busy"))
				}
				return nil
			}
			// The retry is due in an hour: the test makes it due once the
			// channel's queue holds more than a batch.
			StartWorker(t, h.Store, rec, outboxfeed.WorkerConfig{BatchSize: size, RetryBaseDelay: time.Hour, RetryMaxDelay: time.Hour})
			first := h.Stage(t, true, Note(a, `{"first":true}`))
			Eventually(t, 10*time.Second, "the first record waiting for its retry", func() bool {
				return failed.Load() && h.Queued(t, ka) == 1
			})
			n := 3*size + 2
			held, want := stageHeld(t, h, a, n)
			want[ka] = append(first, held...)
			Eventually(t, 30*time.Second, "the channel's records held behind the retry", func() bool {
				return h.Queued(t, ka) == n+1
			})
			h.DueNow(t)
			checkDelivered(t, h, rec, want)

		})
	}
}

// A holder that never completed may have published any record of its
// claim. The Worker that takes the partition over goes through that
// claim in smaller batches (each published as a takeover: the broker
// keeps an id once); when it stops half way, the Worker that goes on must
// still publish the rest as a takeover.
func testTakeoverOutlivesItsHolder(t *testing.T, h *Harness) {
	ctx := context.Background()
	var ns []stage.Notification
	for i := range 8 {
		ns = append(ns, Note("orders/tk", fmt.Sprintf(`{"i":%d}`, i)))
	}
	h.Stage(t, true, ns...)
	b1 := ClaimAny(t, h.Store, "w1", 8, time.Millisecond) // w1 publishes, then dies
	if b1 == nil || len(b1.Records) != 8 || b1.Takeover {
		t.Fatalf("w1's claim = %+v", b1)
	}
	var b2 *outboxfeed.Batch
	Eventually(t, 10*time.Second, "w2 taking the partition over", func() bool {
		b2 = ClaimAny(t, h.Store, "w2", 8, time.Minute)
		return b2 != nil
	})
	if b2.Takeovers != 1 || !b2.Takeover || len(b2.Records) != 8 {
		t.Fatalf("w2's takeover = takeovers %d, takeover %v, %d records", b2.Takeovers, b2.Takeover, len(b2.Records))
	}
	// w2 publishes half of it, completes that, and stops.
	held, _, err := h.Store.Complete(ctx, b2, make([]outboxfeed.Outcome, 4), nil)
	if err != nil || !held {
		t.Fatalf("w2's completion = %v, %v", held, err)
	}
	b3 := ClaimAny(t, h.Store, "w3", 8, time.Minute)
	if b3 == nil || len(b3.Records) != 4 {
		t.Fatalf("w3's claim = %+v", b3)
	}
	if !b3.Takeover {
		t.Fatal("the rest of a claim taken over is published without Takeover: what w1 published would be appended again")
	}
	if held, _, err := h.Store.Complete(ctx, b3, make([]outboxfeed.Outcome, 4), nil); err != nil || !held {
		t.Fatalf("w3's completion = %v, %v", held, err)
	}
	// A later claim, past what w1 held, is no takeover.
	h.Stage(t, true, Note("orders/tk", `{"later":true}`))
	b4 := ClaimAny(t, h.Store, "w3", 8, time.Minute)
	if b4 == nil || b4.Takeover {
		t.Fatalf("a claim past the taken-over one = %+v", b4)
	}
}

// A Worker publishes the first record of its claim and dies. The Worker
// that takes the partition over meets a broker outage (or a retryable
// failure) on its first attempts, so the records it took over wait in the
// retry queue, past the end of the range they came from. When they go
// out, the one the dead Worker published must not be appended to the
// channel a second time: docs/delivery.md says a takeover does not
// duplicate while the record is in the history. Run with the outage and
// with a Retryable failure, each on a store of its own.
func testTakeoverHeldPublishedOnce(t *testing.T, setup func(t *testing.T) *Harness) {
	runParallel(t, []namedCase[takeoverFailure]{
		// An outage long enough that the taken-over range is done (all of
		// it held) before anything goes out.
		{"BrokerOutage", takeoverFailure{ErrBrokerDown, 3}},
		// A Retryable failure of the first record.
		{"Retryable", takeoverFailure{outboxfeed.Retryable(errors.New("target busy")), 1}},
	}, func(t *testing.T, fail takeoverFailure) {
		takeoverHeldPublishedOnce(t, setup(t), fail)
	})
}

// takeoverFailure is what the taking-over Worker's first publishes meet.
type takeoverFailure struct {
	err   error
	calls int32 // how many publishes fail
}

func takeoverHeldPublishedOnce(t *testing.T, h *Harness, fail takeoverFailure) {
	ctx := context.Background()
	key := fanout.Key{Tenant: "acme", Channel: "orders/th"}
	ids := h.Stage(t, true, Note(key.Channel, `{"i":0}`), Note(key.Channel, `{"i":1}`), Note(key.Channel, `{"i":2}`))
	mem, err := fanout.NewMemoryBroker(fanout.MemoryConfig{})
	testenv.Must(t, err, "memory broker")
	defer mem.Stop()

	// The first holder publishes the first record under its lease, as the
	// Worker would (the partition's fence scope and fence), and dies
	// before completing.
	dead := ClaimAny(t, h.Store, "dead", 10, time.Millisecond)
	if dead == nil || len(dead.Records) != 3 || dead.Records[0].ID != ids[0] {
		t.Fatalf("the first holder's claim = %+v", dead)
	}
	r0 := dead.Records[0]
	_, err = mem.Publish(ctx, fanout.Message{
		ID: r0.ID, Key: r0.Key(), Type: r0.Type, SchemaVersion: r0.SchemaVersion, Time: r0.OccurredAt,
		Freshness: fanout.ImmediateFreshness, Data: r0.Payload,
		Fence: fanout.Fence{Scope: fmt.Sprintf("outbox/p%d", dead.Partition), Value: dead.Fence},
	})
	testenv.Must(t, err, "the first holder's publish")

	// The next holder's first publishes fail; later ones go through.
	var calls atomic.Int32
	rec := NewRecorder()
	rec.Before = func(context.Context, fanout.Message) error {
		if calls.Add(1) <= fail.calls {
			return fail.err
		}
		return nil
	}
	pub := publisherFunc(func(ctx context.Context, m fanout.Message) (fanout.Publication, error) {
		if _, err := rec.Publish(ctx, m); err != nil {
			return fanout.Publication{}, err
		}
		return mem.Publish(ctx, m)
	})
	StartWorker(t, h.Store, pub, outboxfeed.WorkerConfig{LeaseDuration: 2 * time.Second})
	rec.WaitFor(t, time.Minute, "every record published", func() bool { return Delivered(rec, ids) })
	Eventually(t, time.Minute, "every record dispatched", func() bool {
		for _, id := range ids {
			if _, ok := StateOf(t, h.Store, id).(outboxfeed.Dispatched); !ok {
				return false
			}
		}
		return true
	})
	top, err := mem.Recover(ctx, key, fanout.Position{}, 0)
	testenv.Must(t, err, "the channel's top")
	r, err := mem.Recover(ctx, key, fanout.Position{Epoch: top.Top.Epoch}, 0)
	testenv.Must(t, err, "recover")
	var got []string
	for _, p := range r.Publications {
		got = append(got, p.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("the channel's history is %v, want each record once, in order: %v (the first holder published %s; the takeover's records were held, then published without Takeover)",
			got, ids, ids[0])
	}
}

// publisherFunc is a Publisher made of a function.
type publisherFunc func(ctx context.Context, msg fanout.Message) (fanout.Publication, error)

func (f publisherFunc) Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error) {
	return f(ctx, msg)
}
