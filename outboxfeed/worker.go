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
	// One of pub (the realtime handler), deliver (a target taking a record
	// at a time) and handle (a Go handler) delivers.
	pub     Publisher
	deliver Deliverer
	handle  Handler
	cfg     WorkerConfig
	// hs is the store's handler side (nil for a store without one); health
	// tracks whether the handler's target is failing (not for realtime).
	hs     HandlerStore
	health health
	// readers records the pairs this Worker reads (nil for a store that
	// does not keep them); reads is what it reports.
	readers ReaderRegistry
	reads   []TypeVersion
	log     *slog.Logger
	m       *metrics
	limit   *ratelog.Limiter

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
	// lead is what the other lanes know of the lead lane (worker_lane.go).
	lead leadState
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

// NewWorker builds a Worker over store that publishes through pub: the
// realtime handler, or (with cfg.Handler) another handler that publishes
// to channels.
func NewWorker(store Store, pub Publisher, cfg WorkerConfig) (*Worker, error) {
	if pub == nil {
		return nil, fmt.Errorf("%w: NewWorker needs a publisher", ErrInvalidConfig)
	}
	return newWorker(store, cfg, DefaultBatchSize, func(w *Worker) { w.pub = pub })
}

// NewDeliveryWorker builds the Worker of handler cfg.Handler, delivering
// each record routed to it through d (a webhook endpoint). store is the
// handler's Store (HandlerStore.ForHandler).
func NewDeliveryWorker(store Store, d Deliverer, cfg WorkerConfig) (*Worker, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: NewDeliveryWorker needs a deliverer", ErrInvalidConfig)
	}
	return newWorker(store, cfg, DefaultHandlerBatchSize, func(w *Worker) { w.deliver = d })
}

// NewHandlerWorker builds the Worker of the Go handler cfg.Handler: h
// receives the records routed to it, a channel's at a time (see Handler).
// store is the handler's Store (HandlerStore.ForHandler).
func NewHandlerWorker(store Store, h Handler, cfg WorkerConfig) (*Worker, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: NewHandlerWorker needs a handler", ErrInvalidConfig)
	}
	return newWorker(store, cfg, DefaultHandlerBatchSize, func(w *Worker) { w.handle = h })
}

// newWorker builds a Worker of cfg, with a BatchSize of batch if cfg has
// none; target sets what it publishes or delivers to.
func newWorker(store Store, cfg WorkerConfig, batch int, target func(*Worker)) (*Worker, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: a Worker needs a store", ErrInvalidConfig)
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = batch
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if h, ok := store.(interface{ Handler() string }); ok && h.Handler() != cfg.Handler {
		return nil, fmt.Errorf("%w: the store consumes for handler %q, the Worker's is %q (HandlerStore.ForHandler)",
			ErrInvalidConfig, h.Handler(), cfg.Handler)
	}
	m, err := newMetrics(cfg.Registerer, cfg.Handler)
	if err != nil {
		return nil, err
	}
	w := &Worker{
		store: store, cfg: cfg, m: m,
		log:       cfg.Logger.With("component", "outbox-worker", "owner", cfg.Owner, "handler", cfg.Handler),
		limit:     ratelog.NewLimiter(cfg.LogEvery, 1),
		recovered: make(chan struct{}, 1),
		armable:   armsWakeups(store),
		gates:     newGates(nil),
	}
	w.hs, _ = store.(HandlerStore)
	w.readers, _ = store.(ReaderRegistry)
	w.reads = cfg.Registry.Reads()
	target(w)
	switch {
	case w.pub != nil:
		w.gates = newGates(w.pub)
	case w.deliver != nil:
		w.gates = newGates(w.deliver)
	default:
		w.gates = newGates(w.handle)
	}
	m.targetUp.Set(1)
	return w, nil
}

// Handler is the name of the handler this Worker delivers for.
func (w *Worker) Handler() string { return w.cfg.Handler }

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
		var unsent []*Batch
		wg.Go(func() { unsent = w.runLanes(runCtx, wake) })
		wg.Go(func() { w.statsLoop(runCtx) })
		wg.Go(func() { w.runProbes(runCtx) })
		wg.Wait()
		w.releaseLeases(unsent)
		for range wake { // the listener closes it once it has stopped
		}
		w.forgetReader()
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

// statsLoop refreshes the backlog gauges and reports what the Worker
// reads (ReaderRegistry): on start, then every StatsInterval or
// ReaderHeartbeat, whichever is shorter. While the store is down it
// queries nothing: the oldest record's age grows from its last reading
// (ageWhileDown), and both are done again as soon as the store answers.
func (w *Worker) statsLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.StatsInterval)
	defer t.Stop()
	hb := time.NewTicker(min(w.cfg.StatsInterval, ReaderHeartbeat))
	defer hb.Stop()
	refresh, beat := true, true
	for {
		if back := w.gates.store.waitCh(); back != nil {
			w.ageWhileDown()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				continue
			case <-back:
				refresh, beat = true, true
			}
		}
		if (beat || refresh) && !w.yieldStats(ctx) {
			return
		}
		if beat {
			w.heartbeat(ctx)
			beat = false
		}
		if refresh {
			w.refreshStats(ctx)
			refresh = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			refresh = true
		case <-hb.C:
			beat = true
		}
	}
}

// heartbeat reports the pairs this Worker reads; a failure is logged
// (rate-limited) and tried again at the next tick.
func (w *Worker) heartbeat(ctx context.Context) {
	if w.readers == nil {
		return
	}
	err := w.readers.Heartbeat(ctx, w.cfg.Handler, w.cfg.Owner, w.reads)
	if err != nil && ctx.Err() == nil {
		if ok, suppressed := w.limit.Allow("heartbeat"); ok {
			w.log.Warn("outbox worker could not report the types it reads", "err", err, "suppressed", suppressed)
		}
	}
}

// forgetReader removes this Worker's reader row once it stopped, within
// ShutdownTimeout.
func (w *Worker) forgetReader() {
	if w.readers == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.ShutdownTimeout)
	defer cancel()
	if err := w.readers.ForgetReader(ctx, w.cfg.Handler, w.cfg.Owner); err != nil {
		w.log.Warn("outbox worker could not remove its reader row; it is ignored once stale", "err", err, "stale_after", ReaderLiveWithin)
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
	w.m.successRatio.Set(w.health.ratio())
	if w.hs != nil && w.cfg.Handler != RealtimeHandler {
		w.retryRecovery(ctx)
		w.refreshState(ctx)
	}
}

// refreshState reads the handler's state for herald_outbox_handler_disabled
// and the target's health (another Worker of the handler may have
// disabled it, an operator enabled it).
func (w *Worker) refreshState(ctx context.Context) {
	gen := w.health.gaugeGen()
	hs, err := w.hs.Handlers(ctx)
	if err != nil {
		return
	}
	for _, h := range hs {
		if h.Name != w.cfg.Handler {
			continue
		}
		off := 0.0
		if h.State == HandlerDisabled {
			off = 1
		}
		// The store's word, both ways: a reading taken just before a lane
		// marked the target failing must not leave the gauge up for good,
		// and one taken just before a lane saw it recover must not put it
		// down (refreshGauges drops a reading older than an observation).
		up := 0.0
		if h.FailingSince.IsZero() && h.State != HandlerDisabled {
			up = 1
		}
		w.refreshGauges(gen, up, off)
	}
}

// signal wakes ch without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
