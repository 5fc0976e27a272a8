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
