package outboxfeed

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/fanout"
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
	wg.Go(func() { w.runLanes(runCtx, wake) })
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

// loop is the claim loop's state between cycles.
type loop struct {
	// owner is the lease owner this lane claims under: the Worker's Owner
	// for the first lane, with "/<n>" appended for the others. Lanes never
	// share a lease owner, so should a claim's commit be lost (the Worker
	// commits asynchronously) and the same fence be handed out again, one
	// lane's stale write cannot match the other lane's lease.
	owner  string
	cursor fanout.Key // where the next claim's walk over channels resumes
	// carry holds the records of the last batch the broker accepted; the
	// next cycle completes them in the same transaction as its claim.
	carry     []*Record
	carryAt   []string        // where each of carry was claimed, when the store says (claimResult.places)
	claimedAt time.Time       // when carry was claimed
	window    int             // head-of-line records the next claim examines
	lastWork  time.Time       // when a claim last found records (or a wake-up came)
	armed     bool            // this Worker armed the wake-up trigger
	arm       bool            // arm it in the next cycle
	disarm    bool            // disarm it in the next cycle
	followUp  bool            // the next idle wait is a short one (just armed)
	kicked    chan struct{}   // signalled when another lane left claimable records
	others    []chan struct{} // the other lanes' kicked
}

// kickOthers wakes the other lanes: this claim left records they can take.
func (l *loop) kickOthers() {
	for _, ch := range l.others {
		signal(ch)
	}
}

// runLanes runs cfg.Lanes claim loops: the lead lane (run), which polls
// and handles wake-ups, and helper lanes that claim only when another lane
// left claimable records behind (claimResult.spare), so that one lane
// publishes while another is in the store. Each lane has its own lease
// owner (laneOwner); the claim keeps each channel with one lane at a time.
func (w *Worker) runLanes(ctx context.Context, wake <-chan struct{}) {
	lanes := make([]*loop, w.cfg.Lanes)
	for i := range lanes {
		lanes[i] = &loop{owner: laneOwner(w.cfg.Owner, i), window: defaultWindow(w.cfg.BatchSize),
			lastWork: time.Now(), kicked: make(chan struct{}, 1)}
	}
	for i, l := range lanes {
		for j, o := range lanes {
			if i != j {
				l.others = append(l.others, o.kicked)
			}
		}
	}
	var wg sync.WaitGroup
	for _, l := range lanes[1:] {
		wg.Go(func() { w.help(ctx, l) })
	}
	w.run(ctx, wake, lanes[0])
	wg.Wait()
}

// laneOwner is the lease owner of lane i (from 0).
func laneOwner(owner string, i int) string {
	if i == 0 {
		return owner
	}
	return owner + "/" + strconv.Itoa(i+1)
}

// help is a helper lane: on each kick it claims until it finds nothing.
func (w *Worker) help(ctx context.Context, l *loop) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.kicked:
		}
		for {
			res := w.cycle(ctx, l)
			if ctx.Err() != nil {
				w.completeCarry(ctx, l)
				return
			}
			if res.storeErr != nil {
				w.setUnready(res.storeErr)
			}
			if !res.again || res.storeErr != nil || res.brokerErr != nil {
				break
			}
		}
	}
}

// run is the claim loop. After a cycle that claimed records it cycles
// again at once (completing that batch and claiming the next in one
// transaction); while records keep coming it polls every
// ActivePollInterval; after IdleAfter without any it arms the wake-up
// trigger and waits for a wake-up or PollInterval.
func (w *Worker) run(ctx context.Context, wake <-chan struct{}, l *loop) {
	var storeFails, brokerFails int
	for {
		res := w.cycle(ctx, l)
		if ctx.Err() != nil {
			w.completeCarry(ctx, l)
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
			if res.found {
				l.lastWork = time.Now()
				if l.armed {
					l.disarm = true
				}
			}
			if res.again {
				continue
			}
			switch {
			case time.Since(l.lastWork) < w.cfg.IdleAfter:
				wait = w.cfg.ActivePollInterval
			case !l.armed:
				l.arm = true // arm, then look once more at once
				continue
			case l.followUp:
				// A producer that saw the trigger disarmed may commit just
				// after the claim that armed it: look again shortly.
				l.followUp = false
				wait = min(w.cfg.PollInterval, max(10*w.cfg.ActivePollInterval, time.Millisecond))
			default:
				l.arm = true // the idle poll re-arms, so the trigger stays armed
			}
		}
		woken, ok := w.wait(ctx, &wake, wait, wakeable)
		if !ok {
			return
		}
		if woken {
			l.lastWork = time.Now()
			if l.armed {
				l.disarm = true
			}
		}
	}
}

// wait sleeps d, or until a wake-up when wakeable. It reports whether a
// wake-up ended it, and false once ctx ended.
func (w *Worker) wait(ctx context.Context, wake *<-chan struct{}, d time.Duration, wakeable bool) (woken, ok bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	var wc <-chan struct{}
	if wakeable {
		wc = *wake
	}
	for {
		select {
		case <-ctx.Done():
			return false, false
		case <-t.C:
			return false, true
		case _, open := <-wc:
			if open {
				return true, true
			}
			*wake, wc = nil, nil
		}
	}
}

type cycleResult struct {
	storeErr  error
	brokerErr error
	found     bool // records were claimed
	again     bool // cycle again at once: to complete them, or to look further
	published bool // at least one publish succeeded
}

// cycle completes the carried batch and claims the next in one store
// transaction, then dispatches what it claimed. The batch the broker
// accepted is carried to the next cycle, or completed on its own when the
// Worker is stopping or backing off.
func (w *Worker) cycle(ctx context.Context, l *loop) cycleResult {
	if !w.ready.Load() {
		if err := w.store.Ping(ctx); err != nil {
			w.completeCarry(ctx, l)
			return cycleResult{storeErr: err}
		}
	}
	req := claimRequest{
		owner: l.owner, limit: w.cfg.BatchSize, lease: w.cfg.LeaseDuration,
		maxAttempts: w.cfg.MaxAttempts, window: l.window, cursor: l.cursor,
		complete: leasesOf(l.carry), completeAt: l.carryAt,
		asyncCommit: !w.cfg.DurableClaims,
	}
	switch {
	case ctx.Err() != nil:
		req.limit = 0 // stopping: only complete what was published
	case l.disarm:
		req.disarm = true
	case l.arm:
		req.arm = 3 * w.cfg.PollInterval
	}
	// A claim is short; it is not cut off by Stop, so a committed claim is
	// always seen (and then released) rather than left to expire.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.LeaseDuration/2)
	res, err := w.claimCycle(cctx, req)
	cancel()
	if err != nil {
		if res.completeDone {
			w.completed(l, res.completed)
		} else {
			w.completeCarry(ctx, l)
		}
		return cycleResult{storeErr: err}
	}
	w.setReady()
	w.completed(l, res.completed)
	switch {
	case req.disarm:
		l.armed, l.disarm, l.arm = false, false, false
	case req.arm > 0:
		l.followUp = !l.armed
		l.armed, l.arm = true, false
	}
	l.cursor = res.next
	w.giveUp(res.exhausted)
	w.giveBack(ctx, l.owner, res.behind)
	if res.spare > 0 {
		l.kickOthers()
	}
	more := w.resizeWindow(l, res)
	if len(res.claimed) == 0 {
		return cycleResult{again: more}
	}
	claimedAt := time.Now()
	s := w.dispatch(ctx, res.claimed, claimedAt)
	w.settle(ctx, l.owner, claimedAt, &s)
	l.carry, l.carryAt, l.claimedAt = s.done, placesOf(s.done, res), claimedAt
	if s.brokerErr != nil || ctx.Err() != nil {
		w.completeCarry(ctx, l)
	}
	return cycleResult{brokerErr: s.brokerErr, found: true, again: s.brokerErr == nil, published: len(s.done) > 0}
}

// resizeWindow adapts how far the next claim looks down the line: a
// quarter further than this one had to, and four times further at once
// (reported true) when a short claim examined its whole window and at
// least half of what it left is stuck behind retries not yet due —
// claimable records may lie beyond. (Records of channels in flight
// elsewhere are not looked past: those channels free up within a cycle.)
func (w *Worker) resizeWindow(l *loop, res claimResult) bool {
	limit := w.cfg.BatchSize
	got := len(res.claimed) + len(res.exhausted)
	if got < limit && res.scanned >= l.window && 2*res.stuck >= res.scanned-got && l.window < limit*maxWindowFactor {
		l.window = min(4*l.window, limit*maxWindowFactor)
		return true
	}
	l.window = max(defaultWindow(limit), res.depth+res.depth/4+64)
	return false
}

// completed records the outcome of completing l.carry: n of its leases
// were still held.
func (w *Worker) completed(l *loop, n int) {
	if len(l.carry) == 0 {
		return
	}
	elapsed := time.Since(l.claimedAt).Seconds()
	for _, r := range l.carry[:min(n, len(l.carry))] {
		w.m.attempts.Observe(float64(r.Attempt + 1))
		w.m.duration.Observe(elapsed)
	}
	w.m.success.Add(float64(n))
	w.leaseLost("complete", len(l.carry)-n)
	l.carry, l.carryAt = nil, nil
}

// placesOf returns the places (claimResult.places) of done, a subset of
// res.claimed, or nil when the store gave none.
func placesOf(done []*Record, res claimResult) []string {
	if len(res.places) != len(res.claimed) || len(done) == 0 {
		return nil
	}
	at := make(map[*Record]string, len(res.claimed))
	for i := range res.claimed {
		at[&res.claimed[i]] = res.places[i]
	}
	out := make([]string, len(done))
	for i, r := range done {
		out[i] = at[r]
	}
	return out
}

// completeCarry completes l.carry on its own (the cycle that would have
// carried it is not going to run), retrying store errors like settle.
func (w *Worker) completeCarry(ctx context.Context, l *loop) {
	if len(l.carry) == 0 {
		return
	}
	wctx, cancel := w.settleContext(ctx, l.claimedAt)
	defer cancel()
	var n int
	err := w.persist(wctx, func(c context.Context) (err error) {
		n, err = w.store.Complete(c, l.owner, leasesOf(l.carry))
		return err
	})
	if err != nil {
		l.carry, l.carryAt = nil, nil // left to expire: published again by the next owner
		return
	}
	w.completed(l, n)
}

// giveBack releases claimed records that must wait (claimResult.behind):
// an earlier record of their channel was not claimed with them.
func (w *Worker) giveBack(ctx context.Context, owner string, recs []Record) {
	if len(recs) == 0 {
		return
	}
	wctx, cancel := w.settleContext(ctx, time.Now())
	defer cancel()
	var n int
	err := w.persist(wctx, func(c context.Context) (err error) {
		n, err = w.store.Release(c, owner, leasesOfRecords(recs))
		return err
	})
	if err == nil {
		w.leaseLost("release", len(recs)-n)
	}
}

// giveUp reports records the claim dead-lettered because an expired lease
// used up their attempts.
func (w *Worker) giveUp(recs []Record) {
	for _, r := range recs {
		w.m.deadLettered.Inc()
		dl, _ := r.State.(DeadLetter)
		w.log.Warn("outbox record dead-lettered", "id", r.ID, "tenant", r.TenantID, "channel", r.Channel,
			"type", r.Type, "schema_version", r.SchemaVersion, "reason", dl.Reason)
	}
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
		now := st.Now
		if now.IsZero() { // a Store that does not say
			now = time.Now()
		}
		age = max(0, now.Sub(st.OldestPending).Seconds())
	}
	w.m.oldestAge.Set(age)
}
