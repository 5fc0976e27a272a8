package fanouttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// Context is a context for one test step, cancelled when t ends.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Stopped fails tb on err and otherwise stops b when tb ends: for what a
// broker's constructor returns.
func Stopped[B interface{ Stop() }](tb testing.TB, b B, err error) B {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Stop)
	return b
}

// MemoryBroker is a fanout.MemoryBroker of cfg, stopped when tb ends.
func MemoryBroker(tb testing.TB, cfg fanout.MemoryConfig) *fanout.MemoryBroker {
	tb.Helper()
	b, err := fanout.NewMemoryBroker(cfg)
	return Stopped(tb, b, err)
}

// StartHub starts b with a Hub of cfg, which it returns; b stops when tb
// ends.
func StartHub(tb testing.TB, b fanout.Broker, cfg fanout.HubConfig) *fanout.Hub {
	tb.Helper()
	hub, err := fanout.NewHub(b, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := b.Start(context.Background(), hub); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Stop)
	return hub
}

// Msg is a valid message id on key, whose data names the id.
func Msg(key fanout.Key, id string) fanout.Message {
	return fanout.Message{
		ID:            id,
		Key:           key,
		Type:          "order.updated",
		SchemaVersion: 1,
		Data:          json.RawMessage(fmt.Sprintf(`{"id": %q}`, id)),
	}
}

// MustPublish publishes m on b, failing t on an error.
func MustPublish(t testing.TB, b fanout.Broker, m fanout.Message) fanout.Publication {
	t.Helper()
	p, err := b.Publish(Context(t), m)
	if err != nil {
		t.Fatalf("publish %s: %v", m.ID, err)
	}
	return p
}

// MustRecover recovers everything on key after since, failing t on an error.
func MustRecover(t testing.TB, b fanout.Broker, key fanout.Key, since fanout.Position) fanout.Recovery {
	t.Helper()
	r, err := b.Recover(Context(t), key, since, 0)
	if err != nil {
		t.Fatalf("recover %v from %v: %v", key, since, err)
	}
	return r
}

// Offsets lists the offsets of pubs.
func Offsets(pubs []fanout.Publication) []uint64 {
	return each(pubs, func(p fanout.Publication) uint64 { return p.Offset })
}

// each lists f of every publication of pubs.
func each[T any](pubs []fanout.Publication, f func(fanout.Publication) T) []T {
	out := make([]T, len(pubs))
	for i, p := range pubs {
		out[i] = f(p)
	}
	return out
}

// EqualOffsets reports whether a is b.
func EqualOffsets(a []uint64, b ...uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Recorder is a fanout.Handler that records what it is handed.
type Recorder struct {
	mu     sync.Mutex
	pubs   []fanout.Publication
	signal chan struct{}
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{signal: make(chan struct{}, 1)} }

// HandlePublication records p.
func (r *Recorder) HandlePublication(p fanout.Publication) {
	r.mu.Lock()
	r.pubs = append(r.pubs, p)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// Snapshot is a copy of what was recorded so far, in order.
func (r *Recorder) Snapshot() []fanout.Publication {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fanout.Publication(nil), r.pubs...)
}

// WaitFor waits until cond holds for the recorded publications and
// returns them; it fails t after 10 seconds.
func (r *Recorder) WaitFor(t testing.TB, what string, cond func([]fanout.Publication) bool) []fanout.Publication {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		if pubs := r.Snapshot(); cond(pubs) {
			return pubs
		}
		select {
		case <-r.signal:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; have %v", what, Offsets(r.Snapshot()))
		}
	}
}

// Fenced is Msg(key, id) published under f.
func Fenced(key fanout.Key, id string, f fanout.Fence) fanout.Message {
	m := Msg(key, id)
	m.Fence = f
	return m
}

// IDs lists the message ids of pubs.
func IDs(pubs []fanout.Publication) []string {
	return each(pubs, func(p fanout.Publication) string { return p.ID })
}

// History is key's whole retained history, which must hold every
// publication of the current epoch.
func History(t *testing.T, b fanout.Broker, key fanout.Key) []fanout.Publication {
	t.Helper()
	top := MustRecover(t, b, key, fanout.Position{}).Top
	r := MustRecover(t, b, key, fanout.Position{Epoch: top.Epoch})
	if !r.Recovered {
		t.Fatalf("history of %v not recovered from offset 0: %+v", key, r)
	}
	return r.Publications
}

// Recording starts b with a recorder subscribed to keys.
func Recording(t *testing.T, b fanout.Broker, keys ...fanout.Key) *Recorder {
	t.Helper()
	rec := NewRecorder()
	if err := b.Start(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := b.Subscribe(Context(t), k); err != nil {
			t.Fatal(err)
		}
	}
	return rec
}

// DeliveredUpTo publishes an unfenced "last" on key, waits until the
// recorder has it, and returns the ids the recorder got for key before it:
// anything fanned out earlier arrives first.
func DeliveredUpTo(t *testing.T, b fanout.Broker, rec *Recorder, key fanout.Key) []string {
	t.Helper()
	last := MustPublish(t, b, Msg(key, "last"))
	pubs := rec.WaitFor(t, "the last publication", func(pubs []fanout.Publication) bool {
		return slices.ContainsFunc(pubs, func(p fanout.Publication) bool { return p.Key == key && p.Position == last.Position })
	})
	var out []string
	for _, p := range pubs {
		if p.Key == key && p.ID != "last" {
			out = append(out, p.ID)
		}
	}
	return out
}

// MustBeStale publishes m on b and fails t unless b refuses it with
// fanout.ErrStaleFence.
func MustBeStale(t *testing.T, b fanout.Broker, m fanout.Message) {
	t.Helper()
	if p, err := b.Publish(Context(t), m); !errors.Is(err, fanout.ErrStaleFence) {
		t.Fatalf("publish %s under %+v: %+v, err = %v; want fanout.ErrStaleFence", m.ID, m.Fence, p, err)
	}
}

// HistoryAndFanOut fails t unless key's history holds the ids want, in
// order, and rec was handed the same (see DeliveredUpTo).
func HistoryAndFanOut(t *testing.T, b fanout.Broker, rec *Recorder, key fanout.Key, want ...string) {
	t.Helper()
	if got := IDs(History(t, b, key)); !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	if got := DeliveredUpTo(t, b, rec, key); !slices.Equal(got, want) {
		t.Fatalf("fanned out %v, want %v", got, want)
	}
}
