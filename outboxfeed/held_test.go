package outboxfeed

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// heldBatchSizes are the batch sizes the held-channel tests run with: the
// smallest the Worker allows, a few small ones where a channel's queue
// exceeds a batch quickly, and a larger one.
var heldBatchSizes = []int{1, 2, 7, 64}

// stageHeld stages n records of channel a in three transactions,
// interleaved with records of two other channels, and returns the ids of
// a's records and of the others', in staging order.
func stageHeld(t *testing.T, h *harness, a string, n int) (held []string, others map[fanout.Key][]string) {
	t.Helper()
	others = map[fanout.Key][]string{}
	per := (n + 2) / 3
	for tx := 0; len(held) < n; tx++ {
		var ns []Notification
		for i := 0; i < per && len(held)+len(ns) < n; i++ {
			ns = append(ns, note(a, fmt.Sprintf(`{"tx":%d,"i":%d}`, tx, i)))
		}
		other := fmt.Sprintf("orders/other%d", tx%2)
		ns = append(ns, note(other, fmt.Sprintf(`{"tx":%d}`, tx)))
		ids := h.stage(t, true, ns...)
		held = append(held, ids[:len(ids)-1]...)
		k := fanout.Key{Tenant: "acme", Channel: other}
		others[k] = append(others[k], ids[len(ids)-1])
	}
	return held, others
}

// checkDelivered waits until every channel got exactly its records, in
// order, and every record is dispatched.
func checkDelivered(t *testing.T, h *harness, rec *recorder, want map[fanout.Key][]string) {
	t.Helper()
	total := 0
	for _, ids := range want {
		total += len(ids)
	}
	rec.waitFor(t, 30*time.Second, fmt.Sprintf("all %d records", total), func() bool { return rec.count() >= total })
	for k, ids := range want {
		got := rec.channel(k)
		if len(got) != len(ids) {
			t.Fatalf("%s: %d publications, want %d", k.Channel, len(got), len(ids))
		}
		for i := range ids {
			if got[i] != ids[i] {
				t.Fatalf("%s: publication %d is %s, want %s (order or duplicate)", k.Channel, i, got[i], ids[i])
			}
		}
	}
	if n := rec.count(); n != total {
		t.Fatalf("%d publications, want %d", n, total)
	}
	for _, ids := range want {
		for _, id := range ids {
			eventually(t, 10*time.Second, "record "+id+" dispatched", func() bool {
				_, ok := stateOf(t, h.store, id).(Dispatched)
				return ok
			})
		}
	}
}

// A broker outage holds every record the Worker claims, so one channel's
// retry queue grows past a batch: once the broker is back, the channel is
// published again, a batch at a time, in order.
func testHeldPastABatchOutage(t *testing.T, h *harness) {
	for _, size := range heldBatchSizes {
		t.Run(fmt.Sprintf("batch%d", size), func(t *testing.T) {
			a := fmt.Sprintf("orders/held%d", size)
			var down atomic.Bool
			down.Store(true)
			rec := newRecorder()
			rec.before = func(context.Context, fanout.Message) error {
				if down.Load() {
					return errBrokerDown
				}
				return nil
			}
			startWorker(t, h.store, rec, WorkerConfig{BatchSize: size})
			n := 3*size + 2
			held, want := stageHeld(t, h, a, n)
			ka := fanout.Key{Tenant: "acme", Channel: a}
			want[ka] = held
			eventually(t, 30*time.Second, "every record of the channel held in its retry queue", func() bool {
				return h.queued(t, ka) == n
			})
			down.Store(false)
			checkDelivered(t, h, rec, want)

		})
	}
}

// A record that fails holds back its channel while more than a batch of
// the channel's records arrive: once it is due, the channel goes on, a
// batch at a time, in order.
func testHeldPastABatchRetry(t *testing.T, h *harness) {
	for _, size := range heldBatchSizes {
		t.Run(fmt.Sprintf("batch%d", size), func(t *testing.T) {
			a := fmt.Sprintf("orders/retry%d", size)
			ka := fanout.Key{Tenant: "acme", Channel: a}
			var failed atomic.Bool
			rec := newRecorder()
			rec.before = func(_ context.Context, msg fanout.Message) error {
				if msg.Key == ka && failed.CompareAndSwap(false, true) {
					return Retryable(errors.New("target busy"))
				}
				return nil
			}
			// The retry is due in an hour: the test makes it due once the
			// channel's queue holds more than a batch.
			startWorker(t, h.store, rec, WorkerConfig{BatchSize: size, RetryBaseDelay: time.Hour, RetryMaxDelay: time.Hour})
			first := h.stage(t, true, note(a, `{"first":true}`))
			eventually(t, 10*time.Second, "the first record waiting for its retry", func() bool {
				return failed.Load() && h.queued(t, ka) == 1
			})
			n := 3*size + 2
			held, want := stageHeld(t, h, a, n)
			want[ka] = append(first, held...)
			eventually(t, 30*time.Second, "the channel's records held behind the retry", func() bool {
				return h.queued(t, ka) == n+1
			})
			h.dueNow(t)
			checkDelivered(t, h, rec, want)

		})
	}
}

// A holder that never completed may have published any record of its
// claim. The Worker that takes the partition over goes through that
// claim in smaller batches (each published as a takeover: the broker
// keeps an id once); when it stops half way, the Worker that goes on must
// still publish the rest as a takeover.
func testTakeoverOutlivesItsHolder(t *testing.T, h *harness) {
	ctx := context.Background()
	var ns []Notification
	for i := range 8 {
		ns = append(ns, note("orders/tk", fmt.Sprintf(`{"i":%d}`, i)))
	}
	h.stage(t, true, ns...)
	b1 := claimAny(t, h.store, "w1", 8, time.Millisecond) // w1 publishes, then dies
	if b1 == nil || len(b1.Records) != 8 || b1.Takeover {
		t.Fatalf("w1's claim = %+v", b1)
	}
	var b2 *Batch
	eventually(t, 10*time.Second, "w2 taking the partition over", func() bool {
		b2 = claimAny(t, h.store, "w2", 8, time.Minute)
		return b2 != nil
	})
	if b2.Takeovers != 1 || !b2.Takeover || len(b2.Records) != 8 {
		t.Fatalf("w2's takeover = takeovers %d, takeover %v, %d records", b2.Takeovers, b2.Takeover, len(b2.Records))
	}
	// w2 publishes half of it, completes that, and stops.
	held, _, err := h.store.Complete(ctx, b2, make([]Outcome, 4), nil)
	if err != nil || !held {
		t.Fatalf("w2's completion = %v, %v", held, err)
	}
	b3 := claimAny(t, h.store, "w3", 8, time.Minute)
	if b3 == nil || len(b3.Records) != 4 {
		t.Fatalf("w3's claim = %+v", b3)
	}
	if !b3.Takeover {
		t.Fatal("the rest of a claim taken over is published without Takeover: what w1 published would be appended again")
	}
	if held, _, err := h.store.Complete(ctx, b3, make([]Outcome, 4), nil); err != nil || !held {
		t.Fatalf("w3's completion = %v, %v", held, err)
	}
	// A later claim, past what w1 held, is no takeover.
	h.stage(t, true, note("orders/tk", `{"later":true}`))
	b4 := claimAny(t, h.store, "w3", 8, time.Minute)
	if b4 == nil || b4.Takeover {
		t.Fatalf("a claim past the taken-over one = %+v", b4)
	}
}
