package outboxfeed

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Worker claims outbox records under a lease, publishes them outside any
// transaction, and completes them only while it still holds the lease (same
// owner and fence). It is a service: Start once, Stop to give back every
// lease not yet completed; both are safe to call twice, and Stop before
// Start.
type Worker struct {
	store Store
	pub   Publisher
	cfg   WorkerConfig
	log   *slog.Logger
	m     *metrics
	limit *logLimiter

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}

	ready   atomic.Bool
	errMu   sync.Mutex
	lastErr error
}

// NewWorker builds a Worker over store that publishes through pub.
func NewWorker(store Store, pub Publisher, cfg WorkerConfig) (*Worker, error) {
	if store == nil || pub == nil {
		return nil, fmt.Errorf("%w: NewWorker needs a store and a publisher", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Worker{
		store: store, pub: pub, cfg: cfg, m: m,
		log:   cfg.Logger.With("component", "outbox-worker", "owner", cfg.Owner),
		limit: newLogLimiter(cfg.LogEvery),
	}, nil
}

// Owner is the lease owner id this Worker claims under.
func (w *Worker) Owner() string { return w.cfg.Owner }

// Start launches the claim loop, the wake-up listener and the metrics
// refresher. It returns at once; the Worker runs until Stop or until ctx
// ends (which also gives the leases back).
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return ErrStopped
	}
	if w.started {
		return nil
	}
	w.started = true
	runCtx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	w.done = make(chan struct{})
	wake := w.store.Wakeups(runCtx)
	var wg sync.WaitGroup
	wg.Go(func() { w.run(runCtx, wake) })
	wg.Go(func() { w.statsLoop(runCtx) })
	go func() {
		wg.Wait()
		for range wake { // the listener closes it once it has stopped
		}
		w.ready.Store(false)
		w.m.storeUp.Set(0)
		w.log.Info("outbox worker stopped")
		close(w.done)
	}()
	w.log.Info("outbox worker started", "batch_size", w.cfg.BatchSize, "lease", w.cfg.LeaseDuration)
	return nil
}

// Stop ends the Worker: in-flight publishes are cancelled, what the broker
// accepted is completed, every other lease is released, then Stop returns.
func (w *Worker) Stop() {
	w.mu.Lock()
	w.stopped = true
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Ready reports whether the outbox store answered the Worker's last claim
// (false before the first one and during an outage).
func (w *Worker) Ready() bool { return w.ready.Load() }

// Readiness is nil while Ready, and otherwise ErrNotReady wrapping the last
// store error — for /readyz.
func (w *Worker) Readiness() error {
	if w.ready.Load() {
		return nil
	}
	w.errMu.Lock()
	defer w.errMu.Unlock()
	if w.lastErr != nil {
		return fmt.Errorf("%w: %v", ErrNotReady, w.lastErr)
	}
	return ErrNotReady
}

func (w *Worker) setReady() {
	if w.ready.Swap(true) {
		return
	}
	w.m.storeUp.Set(1)
	w.errMu.Lock()
	recovered := w.lastErr != nil
	w.lastErr = nil
	w.errMu.Unlock()
	if recovered {
		w.log.Info("outbox store available again; dispatch resumes")
	}
}

func (w *Worker) setUnready(err error) {
	w.ready.Store(false)
	w.m.storeUp.Set(0)
	w.errMu.Lock()
	w.lastErr = err
	w.errMu.Unlock()
	if ok, suppressed := w.limit.allow("store"); ok {
		w.log.Warn("outbox store unavailable; dispatch paused, backing off", "err", err, "suppressed", suppressed)
	}
}

// run is the claim loop: wait for a wake-up or the poll interval, claim,
// dispatch, and loop at once while batches come back full.
func (w *Worker) run(ctx context.Context, wake <-chan struct{}) {
	var storeFails, brokerFails int
	for {
		res := w.cycle(ctx)
		if ctx.Err() != nil {
			return
		}
		wait, wakeable := w.cfg.PollInterval, true
		switch {
		case res.storeErr != nil:
			storeFails++
			w.setUnready(res.storeErr)
			wait, wakeable = outageDelay(storeFails, w.cfg.OutageBaseDelay, w.cfg.OutageMaxDelay), false
		case res.brokerErr != nil:
			storeFails = 0
			brokerFails++
			if ok, suppressed := w.limit.allow("broker"); ok {
				w.log.Warn("broker unavailable; leases released, backing off", "err", res.brokerErr, "suppressed", suppressed)
			}
			wait, wakeable = outageDelay(brokerFails, w.cfg.OutageBaseDelay, w.cfg.OutageMaxDelay), false
		default:
			storeFails = 0
			if res.published {
				brokerFails = 0
			}
			if res.full {
				continue
			}
		}
		if !w.wait(ctx, &wake, wait, wakeable) {
			return
		}
	}
}

// wait sleeps d, or until a wake-up when wakeable; false once ctx ended.
func (w *Worker) wait(ctx context.Context, wake *<-chan struct{}, d time.Duration, wakeable bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	var wc <-chan struct{}
	if wakeable {
		wc = *wake
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case _, ok := <-wc:
			if ok {
				return true
			}
			*wake, wc = nil, nil
		}
	}
}

type cycleResult struct {
	storeErr  error
	brokerErr error
	full      bool // the claim filled the batch: claim again at once
	published bool // at least one publish succeeded
}

// cycle claims one batch and dispatches it.
func (w *Worker) cycle(ctx context.Context) cycleResult {
	if !w.ready.Load() {
		if err := w.store.Ping(ctx); err != nil {
			return cycleResult{storeErr: err}
		}
	}
	// A claim is short; it is not cut off by Stop, so a committed claim is
	// always seen (and then released) rather than left to expire.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.LeaseDuration/2)
	recs, err := w.store.Claim(cctx, w.cfg.Owner, w.cfg.BatchSize, w.cfg.LeaseDuration)
	cancel()
	if err != nil {
		return cycleResult{storeErr: err}
	}
	w.setReady()
	if len(recs) == 0 {
		return cycleResult{}
	}
	published, brokerErr := w.dispatch(ctx, recs, time.Now())
	return cycleResult{brokerErr: brokerErr, full: len(recs) == w.cfg.BatchSize, published: published}
}

// statsLoop refreshes the backlog gauges.
func (w *Worker) statsLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.StatsInterval)
	defer t.Stop()
	for {
		w.refreshStats(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) refreshStats(ctx context.Context) {
	st, err := w.store.Stats(ctx)
	if err != nil {
		return // the claim loop reports store outages
	}
	w.m.pending.Set(float64(st.Pending))
	w.m.deadLetter.Set(float64(st.DeadLetter))
	age := 0.0
	if !st.OldestPending.IsZero() {
		age = max(0, time.Since(st.OldestPending).Seconds())
	}
	w.m.oldestAge.Set(age)
}
