package modeltest

// A run of the model-based test (doc.go): Workers, producers and
// the plan's events.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

// ----------------------------------------------------------------------
// A run.

type modelWorker struct {
	n      int
	name   string
	plan   mWorkerPlan
	w      *outboxfeed.Worker
	pub    *modelPublisher
	dead   atomic.Bool
	cancel context.CancelFunc
	// stopped: it was stopped mid-batch; trapped: an event holds a trap
	// on it.
	stopped, trapped atomic.Bool
}

type modelRun struct {
	t    *testing.T
	be   *modelBackend
	plan *modelPlan
	ctx  context.Context
	stop context.CancelFunc
	b    *modelBroker
	tick atomic.Int64
	t0   time.Time

	mu        sync.Mutex
	cond      *sync.Cond
	finished  int // producer transactions finished
	active    int // producers still running
	holding   int // producers waiting for others to finish (holds, event triggers, gates)
	gate      bool
	nextAt    int // the next event not started is due once this many transactions finished
	evWG      sync.WaitGroup
	txSig     bcast
	recs      []*mRec
	byID      map[string]*mRec
	extra     map[string]int // allowed extra copies: replays of a record already in the history
	deadSeen  map[string]string
	replays   int
	notified  int
	racerN    int
	logMu     sync.Mutex
	log       []string
	workers   []*modelWorker
	nworkers  int
	abort     chan struct{}
	abortOnce sync.Once
	producers sync.WaitGroup
}

func (m *modelRun) logf(format string, args ...any) {
	m.logMu.Lock()
	defer m.logMu.Unlock()
	m.log = append(m.log, fmt.Sprintf("%7.3fs ", time.Since(m.t0).Seconds())+fmt.Sprintf(format, args...))
}

func runModel(t *testing.T, be *modelBackend, plan *modelPlan) {
	replay := fmt.Sprintf("%s=%d %s", envModelSeed, plan.seed, plan.settings.replayEnv())
	t.Logf("model on %s: seed %d, %d transactions (replay: %s)\n%s", plan.caps.store, plan.seed, plan.ops, replay, plan.summary())
	ctx, stop := context.WithCancel(context.Background())
	m := &modelRun{t: t, be: be, plan: plan, ctx: ctx, stop: stop, b: newModelBroker(t), t0: time.Now(),
		byID: map[string]*mRec{}, extra: map[string]int{}, deadSeen: map[string]string{}, abort: make(chan struct{})}
	m.cond = sync.NewCond(&m.mu)
	defer m.teardown()
	defer func() {
		m.logMu.Lock()
		t.Logf("model on %s, seed %d: what happened:\n%s", plan.caps.store, plan.seed, strings.Join(m.log, "\n"))
		m.logMu.Unlock()
		if t.Failed() {
			t.Logf("model on %s: FAILED with seed %d; replay with %s go test -race -count=1 -run 'TestModel%s$' ./outboxfeed/internal/modeltest/",
				plan.caps.store, plan.seed, replay, modelTestSuffix(plan.caps.store))
		}
	}()

	for _, w := range plan.workers {
		m.startWorker(w)
	}
	m.nextAt = math.MaxInt
	if len(plan.events) > 0 {
		m.nextAt = plan.events[0].at
	}
	m.startProducers()
	for i, e := range plan.events {
		next := math.MaxInt
		if i+1 < len(plan.events) {
			next = plan.events[i+1].at
		}
		if !m.event(e, next) {
			break
		}
	}
	// Whatever became of the events, the producers go on, or stop at once
	// when the run already failed.
	if t.Failed() {
		m.stop()
		m.abortOnce.Do(func() { close(m.abort) })
	}
	m.mu.Lock()
	m.nextAt = math.MaxInt
	m.cond.Broadcast()
	m.mu.Unlock()
	m.evWG.Wait()
	m.producers.Wait()
	if t.Failed() {
		return
	}
	m.logf("producers done: %d transactions finished", m.finishedCount())
	missing := m.settle()
	m.stopWorkers()
	m.check(missing)
}

// stopWorkers stops every Worker (the histories are final then).
func (m *modelRun) stopWorkers() {
	var wg sync.WaitGroup
	for _, w := range m.workers {
		wg.Go(w.w.Stop)
	}
	wg.Wait()
	m.logf("workers stopped")
}

func modelTestSuffix(store string) string {
	if store == "postgres" {
		return "Postgres"
	}
	return "SQLite"
}

// teardown releases every trap, stops every Worker, the broker and the
// producers.
func (m *modelRun) teardown() {
	m.abortOnce.Do(func() { close(m.abort) })
	m.stop()
	m.mu.Lock()
	m.cond.Broadcast()
	m.mu.Unlock()
	m.producers.Wait()
	m.evWG.Wait()
	var wg sync.WaitGroup
	for _, w := range m.workers {
		wg.Go(func() {
			w.w.Stop()
			w.cancel()
		})
	}
	wg.Wait()
	m.b.mem.Stop()
}

func (m *modelRun) finishedCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.finished
}

func (m *modelRun) producersDone() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active == 0
}

// ---- Workers

func (m *modelRun) startWorker(p mWorkerPlan) *modelWorker {
	n := m.nworkers
	m.nworkers++
	w := &modelWorker{n: n, name: fmt.Sprintf("m%d", n), plan: p}
	w.pub = &modelPublisher{b: m.b, name: w.name, dead: &w.dead, hit: make(chan modelHit, 1), release: make(chan bool, 1),
		killing: make(chan struct{}), abort: m.abort}
	store := &modelStore{Store: m.be.openStore(m.t), dead: &w.dead}
	cfg := outboxfeed.WorkerConfig{
		Owner: w.name, BatchSize: p.batch, Lanes: p.lanes, Concurrency: p.concurrency,
		PollInterval: 20 * time.Millisecond, LeaseDuration: m.plan.lease, MaxAttempts: modelMaxAttempts,
		RetryBaseDelay: time.Millisecond, RetryMaxDelay: 10 * time.Millisecond,
		OutageBaseDelay: 5 * time.Millisecond, OutageMaxDelay: p.outageMax,
		StatsInterval: 100 * time.Millisecond, ProbeInterval: 50 * time.Millisecond,
		ShutdownTimeout: time.Second, DurableClaims: p.durable,
	}
	ww, err := outboxfeed.NewWorker(store, w.pub, cfg)
	if err != nil {
		m.t.Fatalf("new worker: %v", err)
	}
	w.w = ww
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	if err := ww.Start(ctx); err != nil {
		m.t.Fatalf("start worker: %v", err)
	}
	m.workers = append(m.workers, w)
	m.logf("worker %s started: %s", w.name, p)
	return w
}

// alive lists the Workers neither stopped, dead nor trapped.
func (m *modelRun) alive() []*modelWorker {
	var out []*modelWorker
	for _, w := range m.workers {
		if !w.stopped.Load() && !w.dead.Load() && !w.trapped.Load() {
			out = append(out, w)
		}
	}
	return out
}

// victim picks a Worker for a trap, starting one first so that another
// stays to take over.
func (m *modelRun) victim(pick int) *modelWorker {
	for len(m.alive()) < 2 {
		m.startWorker(m.plan.workers[0])
	}
	a := m.alive()
	w := a[pick%len(a)]
	w.trapped.Store(true)
	return w
}

// trap arms w's next publish and waits for it; false (the trap taken
// back) when it gives up (see waitWork).
func (m *modelRun) trap(w *modelWorker, a modelArm) (modelHit, bool) {
	w.pub.setArm(a)
	var h modelHit
	caught := m.waitWork(w.pub.hit, func() bool { return false }, func(v modelHit) { h = v })
	if caught {
		return h, true
	}
	if w.pub.disarm() {
		return modelHit{}, false
	}
	select {
	case h = <-w.pub.hit:
		return h, true
	case <-m.abort:
		return modelHit{}, false
	}
}

// waitWork waits until hit delivers (got is called with it) or cond
// holds, polling cond every 50 ms; it reports false when it gives up:
// when the producers cannot go on (done, or waiting for this event) and
// every committed record is in the history (dead letters aside), or
// nothing reached the history for a third of the stall bound.
func (m *modelRun) waitWork(hit <-chan modelHit, cond func() bool, got func(modelHit)) bool {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last, lastMove := -1, time.Now()
	for {
		if cond() {
			return true
		}
		select {
		case h := <-hit:
			got(h)
			return true
		case <-tick.C:
		case <-m.abort:
			return false
		}
		idle, settled, appended := m.quiet()
		if appended != last {
			last, lastMove = appended, time.Now()
		}
		if idle && (settled || time.Since(lastMove) > m.plan.stall/3) {
			return cond()
		}
	}
}

// quiet reports whether no producer can go on (all done, or waiting),
// whether every committed record but those meant to be dead letters is
// in the history, and how many publications the history holds.
func (m *modelRun) quiet() (idle, settled bool, appended int) {
	m.mu.Lock()
	idle = m.active == m.holding
	var want []string
	for _, r := range m.recs {
		if r.tx.committed && !r.undone && !r.fate.deadLetters() {
			want = append(want, r.id)
		}
	}
	m.mu.Unlock()
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	settled = true
	for _, id := range want {
		if m.b.copies[id] == 0 {
			settled = false
			break
		}
	}
	return idle, settled, m.b.appended
}

// ---- Producers

func (m *modelRun) startProducers() {
	perProducer := make([][]*mTx, m.plan.producers)
	for _, tx := range m.plan.txs {
		perProducer[tx.producer] = append(perProducer[tx.producer], tx)
	}
	m.mu.Lock()
	m.active = m.plan.producers
	m.mu.Unlock()
	for i, txs := range perProducer {
		conn := m.be.openConn(m.t)
		m.producers.Go(func() {
			defer conn.close()
			defer m.producerDone()
			for _, tx := range txs {
				m.waitEvents()
				if err := m.runTx(conn, i, tx); err != nil {
					if m.ctx.Err() == nil {
						m.t.Errorf("model: producer %d, transaction %d: %v", i, tx.n, err)
					}
					return
				}
			}
		})
	}
}

// committedLocked marks tx committed (now, on the model's clock).
// Caller holds m.mu.
func (m *modelRun) committedLocked(tx *mTx, committed bool) {
	if committed {
		tx.commitTick, tx.committed = m.tick.Add(1), true
	}
}

func (m *modelRun) producerDone() {
	m.mu.Lock()
	m.active--
	m.cond.Broadcast()
	m.mu.Unlock()
	m.txSig.notify()
}

// txFinished counts a finished producer transaction.
func (m *modelRun) txFinished(tx *mTx, committed bool) {
	m.mu.Lock()
	m.committedLocked(tx, committed)
	m.finished++
	m.cond.Broadcast()
	m.mu.Unlock()
	m.txSig.notify()
}

// hold waits until n more producer transactions finished, or until no
// other producer can finish one (all others hold or are done).
func (m *modelRun) hold(n int) {
	if n <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	target := m.finished + n
	m.holding++
	m.cond.Broadcast()
	for m.finished < target && m.active-m.holding > 0 && m.ctx.Err() == nil {
		m.cond.Wait()
	}
	m.holding--
}

// holdRacer waits until n more producer transactions finished, or until
// no producer can finish one.
func (m *modelRun) holdRacer(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	target := m.finished + n
	for m.finished < target && m.active > m.holding && m.ctx.Err() == nil {
		m.cond.Wait()
	}
}

// holdUntilRetired waits until partition part retired, or n more
// producer transactions finished, or waitWork gives up; it reports
// whether the partition retired.
func (m *modelRun) holdUntilRetired(part, n int) bool {
	m.mu.Lock()
	target := m.finished + n
	m.mu.Unlock()
	retired := false
	m.waitWork(nil, func() bool {
		ps, err := m.be.admin.Partitions(m.ctx)
		if err == nil {
			for _, p := range ps {
				if p.Partition == part && p.State == "retired" {
					retired = true
					return true
				}
			}
		}
		return m.finishedCount() >= target
	}, nil)
	return retired
}

// waitEvents waits while an event is due that has not started: events
// happen where the plan puts them, whatever the producers' pace.
func (m *modelRun) waitEvents() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blockWhile(func() bool { return m.finished >= m.nextAt })
}

// waitGate waits while a partition-count change holds commits back.
func (m *modelRun) waitGate() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blockWhile(func() bool { return m.gate })
}

// blockWhile waits while cond holds, counted among the producers that
// cannot finish a transaction (so that holds end). Caller holds m.mu.
func (m *modelRun) blockWhile(cond func() bool) {
	if !cond() || m.ctx.Err() != nil {
		return
	}
	m.holding++
	m.cond.Broadcast()
	for cond() && m.ctx.Err() == nil {
		m.cond.Wait()
	}
	m.holding--
}

func (m *modelRun) setGate(closed bool) {
	m.mu.Lock()
	m.gate = closed
	m.cond.Broadcast()
	m.mu.Unlock()
}

func (m *modelRun) notification(r *mRec) stage.Notification {
	return stage.Notification{TenantID: r.key.Tenant, Channel: r.key.Channel, Type: "order.updated", SchemaVersion: 1,
		Payload: json.RawMessage(fmt.Sprintf(`{"tx":%d,"i":%d,"fate":%q}`, r.tx.n, r.idx, r.fate))}
}

func (m *modelRun) stage(c modelConn, r *mRec) error {
	if r.tx.firstWrite == 0 {
		r.tx.firstWrite = m.tick.Add(1)
	}
	r.stageTick = m.tick.Add(1)
	id, err := c.stage(m.ctx, m.notification(r))
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	r.id = id
	m.b.register(r)
	m.mu.Lock()
	m.recs = append(m.recs, r)
	m.byID[id] = r
	m.mu.Unlock()
	return nil
}

func (m *modelRun) runTx(c modelConn, producer int, tx *mTx) (err error) {
	ctx := m.ctx
	if err := c.begin(ctx); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	open := true
	defer func() {
		if open {
			_ = c.rollback(context.WithoutCancel(ctx))
		}
	}()
	if tx.end == endPrepareCommit || tx.end == endPrepareRollback {
		// docs/delivery.md: a producer that commits in two phases turns
		// the wake-up NOTIFY off in its transaction before it stages
		// (PostgreSQL refuses to prepare a transaction that sent one).
		if err := c.exec(ctx, "SET LOCAL herald.notify = off"); err != nil {
			return fmt.Errorf("set herald.notify: %w", err)
		}
	}
	if tx.business {
		tx.firstWrite = m.tick.Add(1)
		if err := c.business(ctx, producer); err != nil {
			return fmt.Errorf("business row: %w", err)
		}
		m.hold(tx.holdFirst)
	}
	for gi, g := range tx.groups {
		sp := fmt.Sprintf("model_sp%d", gi)
		if g.savepoint {
			if err := c.exec(ctx, "SAVEPOINT "+sp); err != nil {
				return err
			}
		}
		for _, r := range g.recs {
			if err := m.stage(c, r); err != nil {
				return err
			}
		}
		if g.savepoint {
			if g.rollback {
				if err := c.exec(ctx, "ROLLBACK TO SAVEPOINT "+sp); err != nil {
					return err
				}
				for _, r := range g.recs {
					r.undone = true
				}
			}
			if err := c.exec(ctx, "RELEASE SAVEPOINT "+sp); err != nil {
				return err
			}
		}
		m.hold(g.holdAfter)
	}
	m.waitGate()
	committed := false
	switch tx.end {
	case endRollback:
		open = false
		if err := c.rollback(ctx); err != nil {
			return fmt.Errorf("rollback: %w", err)
		}
	case endCommit:
		open = false
		if err := c.commit(ctx); err != nil {
			return fmt.Errorf("commit (outcome unknown): %w", err)
		}
		committed = true
	case endPrepareCommit, endPrepareRollback:
		gid := fmt.Sprintf("herald-model-%d-%d", m.plan.seed, tx.n)
		open = false
		if err := c.prepare(ctx, gid); err != nil {
			if !strings.Contains(err.Error(), "NOTIFY") {
				return fmt.Errorf("prepare transaction: %w", err)
			}
			// The wake-up trigger sent a NOTIFY (herald.notify off
			// notwithstanding), which PostgreSQL refuses to prepare. The
			// transaction rolled back; the count is logged.
			m.mu.Lock()
			m.notified++
			m.mu.Unlock()
			break
		}
		m.hold(tx.prepHold)
		commit := tx.end == endPrepareCommit
		if err := c.finishPrepared(context.WithoutCancel(ctx), gid, commit); err != nil {
			return fmt.Errorf("finish prepared %s (outcome unknown): %w", gid, err)
		}
		committed = commit
	}
	m.txFinished(tx, committed)
	return nil
}

// ---- Events

// event waits until e is due, lets the producers go on (next is when
// the following event is due) and runs e; events that wait for a Worker
// run on their own. It returns false when the run is over.
func (m *modelRun) event(e mEvent, next int) bool {
	for {
		sig := m.txSig.c()
		if m.finishedCount() >= e.at || m.producersDone() {
			break
		}
		select {
		case <-sig:
		case <-m.abort:
			return false
		}
	}
	goOn := func() {
		m.mu.Lock()
		m.nextAt = next
		m.cond.Broadcast()
		m.mu.Unlock()
	}
	if m.t.Failed() {
		return false
	}
	// A trap holds the producers back until it caught its Worker, so that
	// it falls in the middle of their work.
	trap := func(e mEvent, a modelArm, then func(w *modelWorker, h modelHit)) {
		w := m.victim(e.pick)
		m.mu.Lock()
		m.nextAt = max(next, e.at+max(4, m.plan.ops/10)) // some more work for the trap to catch
		m.cond.Broadcast()
		m.mu.Unlock()
		h, ok := m.trap(w, a)
		goOn()
		if !ok {
			w.trapped.Store(false)
			m.logf("%s (%s): no publish came while there was work", eventNames[e.kind], w.name)
			return
		}
		m.evWG.Go(func() {
			defer w.trapped.Store(false)
			then(w, h)
		})
	}
	switch e.kind {
	case evOutage:
		goOn()
		m.b.down.Add(1)
		m.logf("broker outage starts")
	case evOutageEnd:
		goOn()
		m.b.down.Add(-1)
		m.logf("broker outage ends")
	case evPause:
		trap(e, armPause, func(w *modelWorker, h modelHit) { m.pause(e, w, h) })
	case evStopMidBatch:
		trap(e, armBlock, func(w *modelWorker, h modelHit) { m.stopMidBatch(e, w, h) })
	case evCrash:
		trap(e, armDie, func(w *modelWorker, h modelHit) {
			m.logf("worker %s died right after the broker accepted %s (fence %d)", w.name, h.id, h.fence.Value)
		})
	case evStartWorker:
		goOn()
		if len(m.alive()) < 5 {
			m.startWorker(e.worker)
		}
	case evSetPartitions:
		goOn()
		m.setPartitions(e)
	case evReplay:
		goOn()
		if !m.waitDeadLetter() {
			m.logf("replay: no dead letter to replay yet")
		}
		m.replay()
	}
	return !m.t.Failed()
}

// pause holds w's publish until another Worker took its partition over.
func (m *modelRun) pause(e mEvent, w *modelWorker, h modelHit) {
	part := modelPartitionOf(h.fence.Scope)
	m.logf("worker %s paused publishing %s on %v (partition %d, fence %d)", w.name, h.id, h.key, part, h.fence.Value)
	took := m.waitStore(fmt.Sprintf("a takeover of partition %d from the paused %s", part, w.name), func() (bool, error) {
		ps, err := m.be.admin.Partitions(m.ctx)
		if err != nil {
			return false, err
		}
		for _, p := range ps {
			if p.Partition == part && p.Fence > h.fence.Value {
				return true, nil
			}
		}
		return false, nil
	})
	if took {
		m.logf("partition %d taken over; %s resumes (its publish reaches the broker: %v)", part, w.name, e.goOn)
	}
	w.pub.release <- e.goOn
}

// stopMidBatch stops w while its publish is in flight.
func (m *modelRun) stopMidBatch(e mEvent, w *modelWorker, h modelHit) {
	m.logf("worker %s stopped mid-batch publishing %s (fence %d), by cancelling its context: %v", w.name, h.id, h.fence.Value, e.cancel)
	w.stopped.Store(true)
	close(w.pub.killing)
	if e.cancel {
		w.cancel()
	}
	w.w.Stop()
	m.logf("worker %s stopped", w.name)
}

// waitStore polls a condition of the store (it has no signal) until it
// holds; false (and the test failed) after modelWait.
func (m *modelRun) waitStore(what string, cond func() (bool, error)) bool {
	deadline := time.Now().Add(modelWait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return true
		}
		if err != nil {
			lastErr = err
		}
		if time.Now().After(deadline) {
			m.t.Errorf("model: seed %d: timed out after %v waiting for %s (last error: %v)", m.plan.seed, modelWait, what, lastErr)
			return false
		}
		select {
		case <-tick.C:
		case <-m.abort:
			return false
		}
	}
}

// modelPartitionOf is the partition of a fence scope "outbox/p<N>".
func modelPartitionOf(scope string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(scope, "outbox/p"))
	if err != nil {
		return -1
	}
	return n
}

// changing reports whether a partition-count change is in progress.
func (m *modelRun) changing() (bool, error) {
	ps, err := m.be.admin.Partitions(m.ctx)
	if err != nil {
		return false, err
	}
	for _, p := range ps {
		if p.State == "retiring" || p.State == "waiting" {
			return true, nil
		}
	}
	return false, nil
}

func (m *modelRun) setPartitions(e mEvent) {
	if !m.waitDeadLetter() {
		m.logf("partition change: no dead letter yet")
	}
	if !m.waitStore("the previous partition-count change to complete", func() (bool, error) {
		c, err := m.changing()
		return !c, err
	}) {
		return
	}
	// Racers: each begins, stages (its xid assigned now), lets the next
	// one begin while the change has not returned, and commits once it
	// returned. Those that stage while the change's transaction is open
	// stage under the old mapping with an xid above the change's.
	var racers sync.WaitGroup
	returned := make(chan struct{})
	var conns []modelConn
	for range e.racers {
		conns = append(conns, m.be.openConn(m.t))
	}
	start := make(chan struct{})
	next := start
	var racerRecs []*mRec
	for i, c := range conns {
		m.racerN++
		tx := &mTx{n: 1_000_000 + m.racerN, racer: true}
		r := &mRec{tx: tx, key: m.plan.pickKey(m.plan.rng)}
		tx.groups = []mGroup{{recs: []*mRec{r}}}
		racerRecs = append(racerRecs, r)
		mine, after := next, make(chan struct{})
		next = after
		racers.Go(func() {
			defer c.close()
			var once sync.Once
			letNext := func() { once.Do(func() { close(after) }) }
			defer letNext()
			select {
			case <-mine:
			case <-m.abort:
				return
			}
			select {
			case <-returned:
				return // the change is over: no more racing
			default:
			}
			if err := c.begin(m.ctx); err != nil {
				m.t.Errorf("model: racer %d: begin: %v", i, err)
				return
			}
			if err := m.stage(c, r); err != nil {
				_ = c.rollback(context.WithoutCancel(m.ctx))
				m.t.Errorf("model: racer %d: %v", i, err)
				return
			}
			letNext()
			select {
			case <-returned:
			case <-m.abort:
			}
			// Stay open a while, as the producers' long transactions do.
			// One whose record went to a partition being replaced, with an
			// xid the partition's barrier does not wait for, stays open
			// until that partition retired (or for a quarter of the run):
			// its record must still be delivered.
			part := -1
			if rc, ok := c.(modelRaceConn); ok {
				p, risk, err := rc.raceRisk(m.ctx, r.id)
				if err != nil {
					m.t.Errorf("model: racer %d: %v", i, err)
				}
				if risk {
					part = p
				}
			}
			if part >= 0 {
				m.logf("racer %s: in partition %d, which is being replaced, with an xid at or above its barrier: stays open until it retired", r.id, part)
				if m.holdUntilRetired(part, max(e.racerHold, m.plan.ops/4)) {
					m.logf("racer %s: partition %d retired while it was open", r.id, part)
				}
			} else {
				m.holdRacer(e.racerHold)
			}
			if err := c.commit(m.ctx); err != nil {
				m.t.Errorf("model: racer %d: commit (outcome unknown): %v", i, err)
				return
			}
			m.mu.Lock()
			m.committedLocked(tx, true)
			m.mu.Unlock()
		})
	}
	if e.gate {
		m.setGate(true)
	}
	close(start)
	m.logf("partition count → %d (%d racers, commits held: %v)", e.parts, e.racers, e.gate)
	err := m.be.admin.SetPartitions(m.ctx, e.parts)
	close(returned)
	m.setGate(false)
	if err != nil {
		m.t.Errorf("model: seed %d: SetPartitions(%d): %v", m.plan.seed, e.parts, err)
	} else {
		m.logf("partition count change to %d committed", e.parts)
	}
	m.evWG.Go(func() {
		racers.Wait()
		var ids []string
		for _, r := range racerRecs {
			if r.id != "" {
				ids = append(ids, r.id)
			}
		}
		msg, err := m.be.raced(m.ctx, ids)
		if err != nil && m.ctx.Err() == nil {
			m.t.Errorf("model: racers: %v", err)
		}
		m.logf("racers of the change to %d: %s", e.parts, msg)
	})
}

// waitDeadLetter waits until the store holds a dead letter (or waitWork
// gives up); it reports whether one is there.
func (m *modelRun) waitDeadLetter() bool {
	return m.waitWork(nil, func() bool {
		st, err := m.be.adminStore.Stats(m.ctx)
		// During a broker outage nothing is dead-lettered: do not wait.
		return err == nil && st.DeadLetter > 0 || m.b.down.Load() > 0
	}, nil)
}

// replay replays every dead letter, checking that each is one the model
// expects: a Permanent or exhausted record, or one whose partition was
// taken over MaxAttempts times in a row (its dead holder may have
// published it).
func (m *modelRun) replay() int {
	var ids []string
	after := int64(0)
	for {
		page, err := m.be.admin.List(m.ctx, outboxfeed.Filter{State: outboxfeed.StateDeadLetter, Limit: 1000, After: after})
		if err != nil {
			m.t.Errorf("model: list dead letters: %v", err)
			return 0
		}
		for _, r := range page.Records {
			dl, _ := r.State.(outboxfeed.DeadLetter)
			m.mu.Lock()
			rec := m.byID[r.ID]
			m.mu.Unlock()
			switch {
			case rec == nil:
				m.t.Errorf("model: seed %d: dead letter %s is no record the model staged", m.plan.seed, r.ID)
			case rec.fate == fatePermanent && strings.Contains(dl.Reason, "model: target refused"),
				rec.fate == fateExhaust && strings.Contains(dl.Reason, fmt.Sprintf("gave up after %d attempts: model: target busy", modelMaxAttempts)):
			case strings.Contains(dl.Reason, "its lease expired"):
				m.logf("dead letter %s (%v, fate %s): %s", r.ID, rec.key, rec.fate, dl.Reason)
			default:
				m.t.Errorf("model: seed %d: unexpected dead letter %s (%v, fate %s, attempts %d): %s",
					m.plan.seed, r.ID, rec.key, rec.fate, dl.Attempts, dl.Reason)
			}
			m.mu.Lock()
			m.deadSeen[r.ID] = dl.Reason
			m.mu.Unlock()
			ids = append(ids, r.ID)
		}
		if page.Next == 0 {
			break
		}
		after = page.Next
	}
	if len(ids) == 0 {
		return 0
	}
	m.b.mu.Lock()
	for _, id := range ids {
		m.b.replayed[id] = true
		if m.b.copies[id] > 0 || m.b.trapped[id] {
			// Replaying a record already in the history (or that a paused
			// Worker may still put there): a documented duplicate.
			m.extra[id]++
		}
	}
	m.b.mu.Unlock()
	res, err := m.be.admin.Replay(m.ctx, outboxfeed.ReplayRequest{IDs: ids, Actor: "model", Reason: fmt.Sprintf("model seed %d", m.plan.seed)})
	if err != nil {
		m.t.Errorf("model: replay: %v", err)
		return 0
	}
	if len(res.Skipped) > 0 {
		m.t.Errorf("model: seed %d: replay skipped dead letters: %+v", m.plan.seed, res.Skipped)
	}
	m.mu.Lock()
	m.replays += len(res.Replayed)
	m.mu.Unlock()
	m.logf("replayed %d dead letters", len(res.Replayed))
	return len(res.Replayed)
}
