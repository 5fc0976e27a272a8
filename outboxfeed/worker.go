package outboxfeed

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/internal/ratelog"

	"github.com/heraldgw/herald/internal/lifecycle"
)

// Worker claims batches of outbox records under a partition lease,
// publishes them outside any transaction, and completes each batch only
// while it still holds the lease (same owner and fence). It is a service
// (internal/lifecycle): Start once, Stop to give back every lease not yet
// completed; Stop is safe twice and before Start.
type Worker struct {
	store Store
	pub   Publisher
	cfg   WorkerConfig
	log   *slog.Logger
	m     *metrics
	limit *ratelog.Limiter

	svc lifecycle.Service

	ready   atomic.Bool
	errMu   sync.Mutex
	lastErr error
	// recovered is signalled when the store answers again after an
	// outage, so lanes backing off try at once.
	recovered chan struct{}
	// armable: the store has a wake-up trigger the lead lane arms while
	// idle (WakeArmer), so a wake-up means a record was committed.
	armable bool
	// gates pause the lanes during a store or broker outage (worker_gate.go).
	gates gates
}

// WakeArmer is a Store whose Wakeups come from a trigger that the Worker
// arms and disarms through ClaimRequest.Arm and Disarm (the PostgreSQL
// store, unless its trigger is disabled): the Worker then arms it while
// idle, and disarms it while records flow.
type WakeArmer interface {
	ArmsWakeups() bool
}

func armsWakeups(s Store) bool {
	a, ok := s.(WakeArmer)
	return ok && a.ArmsWakeups()
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
		log:       cfg.Logger.With("component", "outbox-worker", "owner", cfg.Owner),
		limit:     ratelog.NewLimiter(cfg.LogEvery, 1),
		recovered: make(chan struct{}, 1),
		armable:   armsWakeups(store),
		gates:     newGates(pub),
	}, nil
}

// Owner is the lease owner id this Worker claims under.
func (w *Worker) Owner() string { return w.cfg.Owner }

// Start launches the claim loop, the wake-up listener and the metrics
// refresher. It returns at once; the Worker runs until Stop or until ctx
// ends (which also gives the leases back).
// A second Start returns an error wrapping ErrStarted, a Start after Stop
// one wrapping ErrStopped.
func (w *Worker) Start(ctx context.Context) error {
	var wake <-chan struct{}
	err := w.svc.Start(ctx, func(runCtx context.Context) error {
		wake = w.store.Wakeups(runCtx)
		return nil
	}, func(runCtx context.Context) {
		var wg sync.WaitGroup
		wg.Go(func() { w.runLanes(runCtx, wake) })
		wg.Go(func() { w.statsLoop(runCtx) })
		wg.Go(func() { w.runProbes(runCtx) })
		wg.Wait()
		for range wake { // the listener closes it once it has stopped
		}
		w.ready.Store(false)
		w.m.storeUp.Set(0)
		w.log.Info("outbox worker stopped")
	})
	if err != nil {
		return fmt.Errorf("outboxfeed: worker start: %w", err)
	}
	w.log.Info("outbox worker started", "batch_size", w.cfg.BatchSize, "lanes", w.cfg.Lanes, "lease", w.cfg.LeaseDuration)
	return nil
}

// Stop ends the Worker: in-flight publishes are cancelled, what the broker
// accepted is completed, every other lease is released, then Stop returns.
// It is safe before Start and twice.
func (w *Worker) Stop() { w.svc.Stop(nil) }

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
		w.storeUp() // after a concurrent setUnready
		return
	}
	w.m.storeUp.Set(1)
	w.errMu.Lock()
	recovered := w.lastErr != nil
	w.lastErr = nil
	w.errMu.Unlock()
	w.storeUp()
	if recovered {
		w.log.Info("outbox store available again; dispatch resumes")
		signal(w.recovered)
	}
}

func (w *Worker) setUnready(err error) {
	// The error and the gauge first: whoever sees the Worker unready sees
	// why, and store_up 0.
	w.errMu.Lock()
	w.lastErr = err
	w.errMu.Unlock()
	w.m.storeUp.Set(0)
	w.ready.Store(false)
	w.storeDown()
	if ok, suppressed := w.limit.Allow("store"); ok {
		w.log.Warn("outbox store unavailable; dispatch paused, backing off", "err", err, "suppressed", suppressed)
	}
}

// statsLoop refreshes the backlog gauges. While the store is down it
// queries nothing: the oldest record's age grows from its last reading
// (ageWhileDown), and the gauges are read again as soon as the store
// answers.
func (w *Worker) statsLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.StatsInterval)
	defer t.Stop()
	for {
		if back := w.gates.store.waitCh(); back != nil {
			w.ageWhileDown()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				continue
			case <-back:
			}
		}
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
		if ctx.Err() == nil {
			w.setUnready(err)
		}
		return
	}
	w.m.pending.Set(float64(st.Pending))
	w.m.deadLetter.Set(float64(st.DeadLetter))
	age := 0.0
	if !st.OldestPending.IsZero() {
		now := st.Now
		if now.IsZero() { // a Store that does not say
			now = time.Now()
		}
		age = max(0, now.Sub(st.OldestPending).Seconds())
	}
	w.m.oldestAge.Set(age)
	w.gates.noteAge(age)
}

// signal wakes ch without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
