package outboxfeed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
)

func TestRegistry(t *testing.T) {
	r, err := ParseRegistry([]byte(`{"order.updated": {"versions": [2, 1, 2]}, "invoice.paid": {"versions": [3], "schemas": {}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []struct {
		typ string
		v   int
	}{{"order.updated", 1}, {"order.updated", 2}, {"invoice.paid", 3}} {
		if err := r.Reader(ok.typ, ok.v); err != nil {
			t.Errorf("Reader(%s, %d) = %v", ok.typ, ok.v, err)
		}
	}
	for _, c := range []struct {
		typ  string
		v    int
		want string
	}{{"order.updated", 3, "no reader for order.updated v3"}, {"order.created", 1, "no reader for order.created v1"}, {"invoice.paid", 0, "no reader for invoice.paid v0"}} {
		if err := r.Reader(c.typ, c.v); err == nil || err.Error() != c.want {
			t.Errorf("Reader(%s, %d) = %v, want %q", c.typ, c.v, err, c.want)
		}
	}
	if got := r.Types()["order.updated"]; len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("versions = %v, want [1 2]", got)
	}
	var none *Registry
	if err := none.Reader("anything", 7); err != nil {
		t.Errorf("nil registry refused: %v", err)
	}
	if err := none.Reader("anything", 0); err == nil {
		t.Error("nil registry accepted version 0")
	}
	for _, bad := range []string{``, `[]`, `null`, `{"Order": {"versions": [1]}}`, `{"a": {}}`, `{"a": {"versions": []}}`, `{"a": {"versions": [0]}}`, `{"a": {"versions": "1"}}`} {
		if _, err := ParseRegistry([]byte(bad)); !errors.Is(err, ErrInvalidRegistry) {
			t.Errorf("ParseRegistry(%q) = %v, want ErrInvalidRegistry", bad, err)
		}
	}
	path := filepath.Join(t.TempDir(), "types.json")
	if err := os.WriteFile(path, []byte(`{"order.updated": {"versions": [1]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := LoadRegistry(path); err != nil || r.Reader("order.updated", 1) != nil {
		t.Fatalf("LoadRegistry = %v", err)
	}
	if _, err := LoadRegistry(path + ".missing"); !errors.Is(err, ErrInvalidRegistry) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestToMessagePermanentFailures(t *testing.T) {
	good := Record{ID: "id", TenantID: "acme", Channel: "orders/1", Type: "order.updated", SchemaVersion: 1,
		Payload: json.RawMessage(`{"a":1}`), OccurredAt: time.Unix(100, 0)}
	msg, err := toMessage(&good, nil)
	if err != nil || msg.ID != "id" || msg.Key.Tenant != "acme" || string(msg.Freshness) != `{"mode":"immediate"}` || !msg.Time.Equal(good.OccurredAt) {
		t.Fatalf("toMessage = %+v, %v", msg, err)
	}
	for name, c := range map[string]struct {
		mut  func(r *Record)
		want string
	}{
		"tenant":    {func(r *Record) { r.TenantID = "a b" }, "invalid tenant_id"},
		"channel":   {func(r *Record) { r.Channel = "orders//1" }, "invalid channel"},
		"type":      {func(r *Record) { r.Type = "Order" }, "type"},
		"payload":   {func(r *Record) { r.Payload = json.RawMessage(`{"a":`) }, "payload is not decodable JSON"},
		"empty":     {func(r *Record) { r.Payload = nil }, "payload is not decodable JSON"},
		"freshness": {func(r *Record) { r.Freshness = json.RawMessage(`{"mode":"later"}`) }, "freshness"},
		"version":   {func(r *Record) { r.SchemaVersion = 0 }, "no reader for order.updated v0"},
		"kind":      {func(r *Record) { r.Kind = "email" }, `invalid kind "email"`},
	} {
		r := good
		c.mut(&r)
		if _, err := toMessage(&r, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, c.want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	for name, c := range map[string]struct {
		cfg  WorkerConfig
		want string
	}{
		"batch":       {WorkerConfig{BatchSize: -1}, "BatchSize -1"},
		"concurrency": {WorkerConfig{Concurrency: -2}, "Concurrency -2"},
		"attempts":    {WorkerConfig{MaxAttempts: -1}, "MaxAttempts"},
		"publish":     {WorkerConfig{PublishTimeout: -time.Second}, "PublishTimeout -1s: must be positive"},
		"retry":       {WorkerConfig{RetryBaseDelay: time.Minute, RetryMaxDelay: time.Second}, "RetryBaseDelay"},
		"poll":        {WorkerConfig{PollInterval: -time.Second}, "PollInterval"},
		"active poll": {WorkerConfig{ActivePollInterval: -time.Millisecond}, "ActivePollInterval"},
		"idle after":  {WorkerConfig{IdleAfter: -time.Millisecond}, "IdleAfter"},
		"cycle":       {WorkerConfig{IdleAfter: time.Millisecond, CycleInterval: 2 * time.Millisecond}, "CycleInterval 2ms: must be at most IdleAfter"},
		"huge batch":  {WorkerConfig{BatchSize: MaxBatchSize + 1}, "BatchSize 10001"},
		"claim delay": {WorkerConfig{ClaimDelay: -time.Millisecond}, "ClaimDelay -1ms"},
		"long delay":  {WorkerConfig{LeaseDuration: time.Second, PublishTimeout: 100 * time.Millisecond, ClaimDelay: 250 * time.Millisecond}, "quarter of LeaseDuration"},
	} {
		err := c.cfg.withDefaults().validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalidConfig mentioning %q", name, err, c.want)
		}
	}
	d := WorkerConfig{}.withDefaults()
	if d.BatchSize != DefaultBatchSize || d.Lanes != 4 || d.MaxAttempts != 10 || d.MaxAge != 24*time.Hour || d.PollInterval != time.Second ||
		d.ActivePollInterval != 500*time.Microsecond || d.IdleAfter != 50*time.Millisecond || d.DurableClaims || d.Owner == "" {
		t.Fatalf("defaults = %+v", d)
	}
	if err := d.validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	short := WorkerConfig{LeaseDuration: 4 * time.Second}.withDefaults()
	if short.PublishTimeout != 2*time.Second || short.validate() != nil {
		t.Fatalf("a short lease gets PublishTimeout %v", short.PublishTimeout)
	}
	if w := short.startWindow(); w != 2*time.Second {
		t.Fatalf("a batch under a 4s lease starts records for %v, want half the lease", w)
	}
	// A call may outlast the lease, which is renewed while it runs (a
	// webhook's request): a batch then starts records for one call's time.
	long := WorkerConfig{LeaseDuration: time.Second, PublishTimeout: time.Minute}.withDefaults()
	if err := long.validate(); err != nil {
		t.Fatalf("a PublishTimeout longer than the lease: %v", err)
	}
	if w := long.startWindow(); w != time.Minute {
		t.Fatalf("a batch whose calls may take a minute starts records for %v, want a minute", w)
	}
	if _, err := NewWorker(nil, nil, WorkerConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewWorker(nil, nil) = %v", err)
	}
}

func TestSettleContextOutlivesStopBriefly(t *testing.T) {
	w := &Worker{cfg: WorkerConfig{LeaseDuration: time.Hour, ShutdownTimeout: 50 * time.Millisecond}}
	ctx, stop := context.WithCancel(context.Background())
	wctx, done := w.settleContext(ctx, time.Now())
	defer done()
	stop()
	if wctx.Err() != nil {
		t.Fatal("outcomes must still be writable right after Stop")
	}
	select {
	case <-wctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("settle context outlived ShutdownTimeout after Stop")
	}
	// Without Stop it lasts until the lease deadline.
	wctx2, done2 := w.settleContext(context.Background(), time.Now())
	defer done2()
	if dl, ok := wctx2.Deadline(); !ok || time.Until(dl) < 59*time.Minute {
		t.Fatalf("deadline = %v, want the lease deadline", dl)
	}
}

func TestSharedDeadlineRenewsAtHalfTime(t *testing.T) {
	var d sharedDeadline
	defer d.stop()
	start := time.Now()
	first := d.get(context.Background(), start, time.Minute)
	if dl, ok := first.Deadline(); !ok || dl.Sub(start) < 59*time.Second {
		t.Fatalf("deadline %v after %v, want about a minute", dl, start)
	}
	if d.get(context.Background(), start.Add(30*time.Second), time.Minute) != first {
		t.Fatal("a publish with half the timeout left got a new deadline")
	}
	second := d.get(context.Background(), start.Add(31*time.Second), time.Minute)
	if second == first || first.Err() == nil {
		t.Fatal("a publish with less than half the timeout left kept the old deadline (or it was not released)")
	}
	d.stop()
	if second.Err() == nil {
		t.Fatal("stop did not release the deadline")
	}
	if third := d.get(context.Background(), start.Add(32*time.Second), time.Minute); third.Err() != nil {
		t.Fatalf("get after stop = %v", third.Err())
	}
}

func TestActivePollBacksOff(t *testing.T) {
	base, idleAfter := 500*time.Microsecond, 50*time.Millisecond
	want := []time.Duration{500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond,
		8 * time.Millisecond, 12500 * time.Microsecond, 12500 * time.Microsecond}
	for empties, w := range want {
		if got := activePoll(base, idleAfter, empties); got != w {
			t.Errorf("activePoll after %d empty claims = %v, want %v", empties, got, w)
		}
	}
	if got := activePoll(base, idleAfter, 1<<20); got != idleAfter/4 {
		t.Errorf("activePoll after many empty claims = %v, want the cap %v", got, idleAfter/4)
	}
	// A base above the cap is kept.
	if got := activePoll(20*time.Millisecond, idleAfter, 3); got != 20*time.Millisecond {
		t.Errorf("activePoll with a base above the cap = %v, want the base", got)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want failureClass
	}{
		{errors.New("dial tcp: connection refused"), failureOutage},
		{context.DeadlineExceeded, failureOutage},
		{Retryable(errors.New("busy")), failureRetry},
		{fmt.Errorf("wrapped: %w", Retryable(errors.New("busy"))), failureRetry},
		{Permanent(errors.New("gone")), failurePermanent},
		{fmt.Errorf("fanout: publish: %w: data is not valid JSON", fanout.ErrInvalidMessage), failurePermanent},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	if Retryable(nil) != nil || Permanent(nil) != nil {
		t.Fatal("wrapping nil must stay nil")
	}
	if err := Permanent(context.Canceled); !errors.Is(err, context.Canceled) || err.Error() != context.Canceled.Error() {
		t.Fatalf("Permanent hides its cause: %v", err)
	}
}

// A claim of the leading Worker that found a backlog keeps it busy for
// IdleAfter plus twice as long as the claim took (the batch's publishing,
// then its next claim, riding on the batch's completion), and a partial
// batch marks nothing.
func TestPrecedenceHoldsForTheClaim(t *testing.T) {
	var p Precedence
	w := &Worker{cfg: WorkerConfig{Leads: &p, IdleAfter: 50 * time.Millisecond, BatchSize: 10}}
	w.leadClaimed(&Batch{Records: make([]Record, 3), leased: time.Now().Add(-time.Hour)})
	if !p.led.Load() || p.busyUntil.Load() != 0 {
		t.Fatalf("a partial batch: led %v, busy until %d", p.led.Load(), p.busyUntil.Load())
	}
	before := time.Now()
	w.leadClaimed(&Batch{Records: make([]Record, 10), leased: before.Add(-400 * time.Millisecond)})
	if until := time.Unix(0, p.busyUntil.Load()); until.Before(before.Add(850*time.Millisecond)) || !p.Busy() {
		t.Fatalf("a full batch claimed in 400ms: busy until %v after the claim returned, want at least 850ms", until.Sub(before))
	}
	// With the realtime handler's batch, a claim of a handler's default
	// batch is a backlog though the batch is not full; one record fewer
	// is none.
	var q Precedence
	w = &Worker{cfg: WorkerConfig{Leads: &q, IdleAfter: 50 * time.Millisecond, BatchSize: DefaultBatchSize}}
	w.leadClaimed(&Batch{Records: make([]Record, DefaultHandlerBatchSize-1), leased: time.Now()})
	if q.busyUntil.Load() != 0 {
		t.Fatalf("%d records of a batch of %d marked a backlog", DefaultHandlerBatchSize-1, DefaultBatchSize)
	}
	w.leadClaimed(&Batch{Records: make([]Record, DefaultHandlerBatchSize), leased: time.Now()})
	if !q.Busy() {
		t.Fatalf("%d records of a batch of %d marked no backlog", DefaultHandlerBatchSize, DefaultBatchSize)
	}
	for _, c := range []struct {
		sent time.Time
		want time.Duration
	}{
		{time.Time{}, 50 * time.Millisecond},                        // not claimed by the Worker
		{before.Add(time.Second), 50 * time.Millisecond},            // a clock that went back
		{before.Add(-20 * time.Millisecond), 90 * time.Millisecond}, // a 20ms claim
	} {
		if got := busyHold(50*time.Millisecond, before, c.sent); got != c.want {
			t.Errorf("busyHold(50ms, sent %v before): %v, want %v", before.Sub(c.sent), got, c.want)
		}
	}
}

// A yielding Worker's statistics read waits while the leading Worker is
// busy, at most PollInterval, without counting as a yield; one that
// yields to nothing reads at once.
func TestYieldStats(t *testing.T) {
	var p Precedence
	p.led.Store(true)
	p.markBusy(time.Now(), time.Hour)
	ctx := context.Background()
	w := &Worker{cfg: WorkerConfig{YieldsTo: &p, PollInterval: 30 * time.Millisecond}}
	start := time.Now()
	if !w.yieldStats(ctx) || time.Since(start) < 30*time.Millisecond || p.Yields() != 0 {
		t.Fatalf("leader busy: waited %v (want its 30ms bound), %d yields counted", time.Since(start), p.Yields())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if w.yieldStats(cctx) {
		t.Fatal("the wait went on after its context ended")
	}
	free := &Worker{cfg: WorkerConfig{PollInterval: time.Hour}}
	if !free.yieldStats(ctx) {
		t.Fatal("a Worker that yields to nothing waited")
	}
}

// A Precedence holds a yielding Worker back while the leading one is
// busy, at most the wait's bound, and not at all once it is not.
func TestPrecedenceWait(t *testing.T) {
	var p Precedence
	ctx := context.Background()
	start := time.Now()
	if !p.wait(ctx, 30*time.Millisecond) || time.Since(start) < 30*time.Millisecond || p.Yields() != 1 {
		t.Fatalf("before the leader's first claim: waited %v (want its 30ms bound), %d yields", time.Since(start), p.Yields())
	}
	p.led.Store(true)
	start = time.Now()
	if !p.wait(ctx, time.Hour) || time.Since(start) > time.Minute || p.Yields() != 1 {
		t.Fatalf("idle: waited %v, %d yields", time.Since(start), p.Yields())
	}
	p.markBusy(time.Now(), time.Hour)
	p.markBusy(time.Now(), time.Millisecond) // an earlier end changes nothing
	if !p.Busy() {
		t.Fatal("not busy after markBusy for an hour")
	}
	start = time.Now()
	if !p.wait(ctx, 50*time.Millisecond) || time.Since(start) < 50*time.Millisecond || p.Yields() != 2 {
		t.Fatalf("busy: waited %v (want its 50ms bound), %d yields", time.Since(start), p.Yields())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if p.wait(cctx, time.Hour) {
		t.Fatal("wait went on after its context ended")
	}
	var q Precedence
	q.led.Store(true)
	start = time.Now() // before the backlog begins: waited ≥ 30ms holds however late wait starts
	q.markBusy(start, 30*time.Millisecond)
	if !q.wait(ctx, time.Hour) || time.Since(start) < 30*time.Millisecond || q.Busy() {
		t.Fatalf("short backlog: waited %v, busy %v", time.Since(start), q.Busy())
	}
}

// After takeovers consecutive takeovers a Worker dispatches a prefix of
// the batch that never grows, and is one record by the last takeover
// before MaxAttempts: the record then dead-lettered is the one that
// killed every holder (it was in every prefix), for any batch size and
// MaxAttempts — halving alone left 1,000>>2 records at MaxAttempts 3.
func TestTakeoverPrefixIsolatesTheRecordByMaxAttempts(t *testing.T) {
	for _, bs := range []int{1, 2, 3, 7, 1000, 1024, 1025, 4000, 10000} {
		for _, maxAttempts := range []int{2, 3, 5, 10, 25} {
			for _, n := range []int{1, bs / 2, bs} {
				if n < 1 {
					continue
				}
				prev := n
				for tk := 1; tk < maxAttempts; tk++ {
					got := takeoverPrefix(n, bs, tk, maxAttempts)
					if got < 1 || got > prev {
						t.Fatalf("batch %d of %d, MaxAttempts %d: takeover %d dispatches %d after %d", n, bs, maxAttempts, tk, got, prev)
					}
					prev = got
				}
				if prev != 1 {
					t.Fatalf("batch %d of %d, MaxAttempts %d: %d records at the last takeover before MaxAttempts, want 1", n, bs, maxAttempts, prev)
				}
			}
		}
	}
}

// A claim finds a backlog at BacklogRecords records whatever the batch
// size above 16 of them, and at a sixteenth of a smaller batch.
func TestBacklogRecords(t *testing.T) {
	for batch, want := range map[int]int{1: 1, 15: 1, 100: 6, 992: 62, 1000: 62, 4000: 62, MaxBatchSize: 62} {
		if got := (WorkerConfig{BatchSize: batch}).backlogRecords(); got != want {
			t.Errorf("batch %d: backlog at %d records, want %d", batch, got, want)
		}
	}
}
