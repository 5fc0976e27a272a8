package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

// quickOutageRetry is the OutageMaxDelay of the Workers of tests that end
// an outage and wait for delivery: the Worker retries at most this long
// after the outage ends, however long it lasted (by default the backoff
// grows to 30 s, which a slow machine's longer outage reaches).
const quickOutageRetry = 200 * time.Millisecond

// WakeupsOnly is a PollInterval longer than any test: a Worker given it
// finds a record staged while it waits only through a wake-up, however
// long the test then waits for the delivery.
const WakeupsOnly = time.Hour

// Recorder is a Publisher that remembers what it accepted, per channel in
// order. Before, when set, runs first and may fail or block the publish.
type Recorder struct {
	Before func(ctx context.Context, msg fanout.Message) error

	mu      sync.Mutex
	msgs    []fanout.Message
	byKey   map[fanout.Key][]string
	calls   int
	changed chan struct{}
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{byKey: map[fanout.Key][]string{}, changed: make(chan struct{}, 1)}
}

// Publish implements outboxfeed.Publisher.
func (r *Recorder) Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error) {
	r.mu.Lock()
	r.calls++
	r.mu.Unlock()
	signal(r.changed)
	if r.Before != nil {
		if err := r.Before(ctx, msg); err != nil {
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

// Messages is a copy of what was accepted, in order.
func (r *Recorder) Messages() []fanout.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fanout.Message(nil), r.msgs...)
}

// Count is how many publishes were accepted.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// CallCount is how many publishes were tried.
func (r *Recorder) CallCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// Channel is the ids accepted on channel k, in order.
func (r *Recorder) Channel(k fanout.Key) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.byKey[k]...)
}

// ByID is the first accepted message with id.
func (r *Recorder) ByID(id string) (fanout.Message, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if m.ID == id {
			return m, true
		}
	}
	return fanout.Message{}, false
}

// WaitFor blocks until cond holds (re-checked on every publish call) or
// fails the test after timeout.
func (r *Recorder) WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
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

// signal wakes ch without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Eventually polls cond (a store condition has no signal) until it holds,
// failing the test after timeout (a bound far above what a busy machine
// needs, not a budget).
//
// A seen func, if given, says what was last seen when it times out.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool, seen ...func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			last := ""
			for _, f := range seen {
				last += "; last seen: " + f()
			}
			t.Fatalf("timed out after %v waiting for %s%s", timeout, what, last)
		}
		<-tick.C
	}
}

// JSONEqual reports whether two JSON texts hold the same value.
func JSONEqual(t testing.TB, got, want json.RawMessage) bool {
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

// Note is a notification of tenant acme, type order.updated v1.
func Note(channel string, payload string) stage.Notification {
	return stage.Notification{
		TenantID: "acme", Channel: channel, Type: "order.updated",
		SchemaVersion: 1, Payload: json.RawMessage(payload),
	}
}

// MustGet loads a record or fails the test.
func MustGet(t testing.TB, s outboxfeed.Store, id string) outboxfeed.Record {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return r
}

// StateOf is a record's state.
func StateOf(t testing.TB, s outboxfeed.Store, id string) outboxfeed.State {
	t.Helper()
	return MustGet(t, s, id).State
}

// EventuallyIn waits until record id of s is in state S (Dispatched,
// DeadLetter, …), failing t after timeout with what.
func EventuallyIn[S outboxfeed.State](t testing.TB, timeout time.Duration, what string, s outboxfeed.Store, id string) {
	t.Helper()
	Eventually(t, timeout, what, func() bool {
		_, ok := StateOf(t, s, id).(S)
		return ok
	})
}

// Worker is a Worker started by StartWorker, with its metrics.
type Worker struct {
	*outboxfeed.Worker
	reg *prometheus.Registry
}

// StartWorker starts a Worker with fast test timings (overridable) and
// its metrics on a registry of its own, and stops it when the test ends.
func StartWorker(t testing.TB, s outboxfeed.Store, p outboxfeed.Publisher, cfg outboxfeed.WorkerConfig) *Worker {
	t.Helper()
	return startWorker(t, cfg, func(cfg outboxfeed.WorkerConfig) (*outboxfeed.Worker, error) { return outboxfeed.NewWorker(s, p, cfg) })
}

// StartDeliveryWorker is StartWorker for a handler delivering through d.
func StartDeliveryWorker(t testing.TB, s outboxfeed.Store, d outboxfeed.Deliverer, cfg outboxfeed.WorkerConfig) *Worker {
	t.Helper()
	return startWorker(t, cfg, func(cfg outboxfeed.WorkerConfig) (*outboxfeed.Worker, error) {
		return outboxfeed.NewDeliveryWorker(s, d, cfg)
	})
}

// StartHandlerWorker is StartWorker for a Go handler.
func StartHandlerWorker(t testing.TB, s outboxfeed.Store, h outboxfeed.Handler, cfg outboxfeed.WorkerConfig) *Worker {
	t.Helper()
	return startWorker(t, cfg, func(cfg outboxfeed.WorkerConfig) (*outboxfeed.Worker, error) {
		return outboxfeed.NewHandlerWorker(s, h, cfg)
	})
}

func startWorker(t testing.TB, cfg outboxfeed.WorkerConfig, build func(outboxfeed.WorkerConfig) (*outboxfeed.Worker, error)) *Worker {
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
	reg := prometheus.NewRegistry()
	switch r := cfg.Registerer.(type) {
	case nil:
		cfg.Registerer = reg
	case *prometheus.Registry:
		reg = r
	}
	w, err := build(cfg)
	if err != nil {
		t.Fatalf("new worker: %v", err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(w.Stop)
	return &Worker{Worker: w, reg: reg}
}

// Metric is the value of a Worker metric (a counter or a gauge), with the
// labels given as name, value pairs; 0 when it has not been set.
func (w *Worker) Metric(name string, labels ...string) float64 {
	mfs, err := w.reg.Gather()
	if err != nil {
		panic(fmt.Sprintf("storetest: gather metrics: %v", err))
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Outcomes is herald_outbox_outcomes_total{result}.
func (w *Worker) Outcomes(result string) float64 {
	return w.Metric("herald_outbox_outcomes_total", "result", result)
}

// Claims is herald_outbox_claims_total{result}, both results summed when
// result is "".
func (w *Worker) Claims(result string) float64 {
	if result == "" {
		return w.Claims(outboxfeed.ClaimBatch) + w.Claims(outboxfeed.ClaimEmpty)
	}
	return w.Metric("herald_outbox_claims_total", "result", result)
}

// ErrBrokerDown is a publish error the Worker takes for a broker outage.
var ErrBrokerDown = errors.New("broker unreachable")

// Deliver implements outboxfeed.Deliverer: the record is recorded (and
// Before consulted) as a publish of its message would be.
func (r *Recorder) Deliver(ctx context.Context, rec *outboxfeed.Record) error {
	_, err := r.Publish(ctx, fanout.Message{ID: rec.ID, Key: rec.Key(), Type: rec.Type, SchemaVersion: rec.SchemaVersion,
		Time: rec.OccurredAt, Data: rec.Payload})
	return err
}

// FailingRecorder returns a Recorder whose every publish fails with err
// while on is set; on starts set.
func FailingRecorder(err error) (rec *Recorder, on *atomic.Bool) {
	on = new(atomic.Bool)
	on.Store(true)
	rec = NewRecorder()
	rec.Before = func(context.Context, fanout.Message) error {
		if on.Load() {
			return err
		}
		return nil
	}
	return rec, on
}
