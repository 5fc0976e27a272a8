package outboxfeed

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// recorder is a Publisher that remembers what it accepted, per channel in
// order. before, when set, runs first and may fail or block the publish.
type recorder struct {
	before func(ctx context.Context, msg fanout.Message) error

	mu      sync.Mutex
	msgs    []fanout.Message
	byKey   map[fanout.Key][]string
	calls   int
	changed chan struct{}
}

func newRecorder() *recorder {
	return &recorder{byKey: map[fanout.Key][]string{}, changed: make(chan struct{}, 1)}
}

func (r *recorder) Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error) {
	r.mu.Lock()
	r.calls++
	r.mu.Unlock()
	signal(r.changed)
	if r.before != nil {
		if err := r.before(ctx, msg); err != nil {
			return fanout.Publication{}, err
		}
	}
	r.mu.Lock()
	r.msgs = append(r.msgs, msg)
	r.byKey[msg.Key] = append(r.byKey[msg.Key], msg.ID)
	off := uint64(len(r.byKey[msg.Key]))
	r.mu.Unlock()
	signal(r.changed)
	return fanout.Publication{Message: msg, Position: fanout.Position{Offset: off, Epoch: "test"}}, nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

func (r *recorder) callCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

func (r *recorder) channel(k fanout.Key) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.byKey[k]...)
}

func (r *recorder) byID(id string) (fanout.Message, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if m.ID == id {
			return m, true
		}
	}
	return fanout.Message{}, false
}

// waitFor blocks until cond holds (re-checked on every publish call) or
// fails the test after timeout.
func (r *recorder) waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-r.changed:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

// eventually polls cond (a store condition has no signal) until it holds.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

func jsonEqual(t *testing.T, got, want json.RawMessage) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got invalid JSON %q: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want invalid JSON %q: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

func note(channel string, payload string) Notification {
	return Notification{
		TenantID: "acme", Channel: channel, Type: "order.updated",
		SchemaVersion: 1, Payload: json.RawMessage(payload),
	}
}

func mustGet(t *testing.T, s Store, id string) Record {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return r
}

func stateOf(t *testing.T, s Store, id string) State {
	t.Helper()
	return mustGet(t, s, id).State
}

// startWorker starts a Worker with fast test timings (overridable) and
// stops it when the test ends.
func startWorker(t *testing.T, s Store, p Publisher, cfg WorkerConfig) *Worker {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.OutageBaseDelay == 0 {
		cfg.OutageBaseDelay, cfg.OutageMaxDelay = 5*time.Millisecond, 40*time.Millisecond
	}
	if cfg.StatsInterval == 0 {
		cfg.StatsInterval = 50 * time.Millisecond
	}
	if cfg.RetryBaseDelay == 0 {
		cfg.RetryBaseDelay, cfg.RetryMaxDelay = time.Millisecond, 5*time.Millisecond
	}
	w, err := NewWorker(s, p, cfg)
	if err != nil {
		t.Fatalf("new worker: %v", err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(w.Stop)
	return w
}

var errBrokerDown = errors.New("broker unreachable")
