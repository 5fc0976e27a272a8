package outboxfeed

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/wait"
	"github.com/heraldgw/herald/outboxfeed/internal/backoff"
)

// Pinger is a Publisher that can tell whether its broker answers; the
// fanout brokers are Pingers (fanout.Broker.Ping, the check behind
// /readyz). A Worker whose Publisher is a Pinger gates dispatch on it:
// once a publish meets a broker outage the Worker claims nothing and
// writes nothing until a Ping answers (it pings with backoff capped at
// BrokerProbeMaxInterval), then resumes at once. A Publisher that is not
// a Pinger is retried after the outage backoff instead
// (OutageBaseDelay, OutageMaxDelay), each retry claiming a batch.
type Pinger interface {
	Ping(ctx context.Context) error
}

// The fanout brokers can be pinged.
var _ Pinger = fanout.Broker(nil)

// gates are what the lanes wait for before each claim: the store
// answering and (with a Pinger) the broker answering. Each closed gate
// has a prober that reopens it.
type gates struct {
	store  gate
	broker gate
	pinger Pinger // nil: the Publisher cannot be pinged, the broker gate stays open
	// lastAge is the oldest record's age at the last stats reading, at
	// lastAgeAt (read and written by the stats loop only).
	lastAge   float64
	lastAgeAt time.Time
}

// noteAge records the oldest record's age just read.
func (g *gates) noteAge(age float64) { g.lastAge, g.lastAgeAt = age, time.Now() }

// ageWhileDown advances the oldest record's age gauge while the store is
// down and cannot be read: a record that was waiting at the last reading
// still waits (OutboxBacklogStale fires as the outage lasts).
func (w *Worker) ageWhileDown() {
	if g := &w.gates; g.lastAge > 0 {
		w.m.oldestAge.Set(g.lastAge + time.Since(g.lastAgeAt).Seconds())
	}
}

func newGates(target any) gates {
	p, _ := target.(Pinger)
	return gates{store: newGate(), broker: newGate(), pinger: p}
}

// gate is a condition that is open, or shut until its prober opens it.
type gate struct {
	shut atomic.Bool // read without the lock on every claim
	// shutSig wakes the prober when the gate shuts (buffered, coalesced).
	shutSig chan struct{}

	mu       sync.Mutex
	opened   chan struct{} // closed when the gate opens again
	openedAt time.Time     // when it last opened
}

func newGate() gate { return gate{shutSig: make(chan struct{}, 1)} }

// close shuts g; it reports whether g was open.
func (g *gate) close() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut.Load() {
		return false
	}
	g.opened = make(chan struct{})
	g.shut.Store(true)
	signal(g.shutSig)
	return true
}

// lockShut reports whether g is shut, and then returns with g.mu held
// (the caller unlocks it); an open gate, the common case, is seen
// without taking the lock.
func (g *gate) lockShut() bool {
	if !g.shut.Load() {
		return false
	}
	g.mu.Lock()
	if !g.shut.Load() {
		g.mu.Unlock()
		return false
	}
	return true
}

// open opens g, waking whoever waits; it reports whether g was shut.
func (g *gate) open() bool {
	if !g.lockShut() {
		return false
	}
	defer g.mu.Unlock()
	g.shut.Store(false)
	g.openedAt = time.Now()
	close(g.opened)
	return true
}

// waitCh is nil while g is open, else a channel closed when it opens.
func (g *gate) waitCh() <-chan struct{} {
	if !g.lockShut() {
		return nil
	}
	defer g.mu.Unlock()
	return g.opened
}

// sinceOpened is how long ago g last opened (long ago if never).
func (g *gate) sinceOpened() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.openedAt.IsZero() {
		return time.Duration(1<<63 - 1)
	}
	return time.Since(g.openedAt)
}

// await blocks until g is open; false when ctx ended first.
func (g *gate) await(ctx context.Context) bool {
	for {
		ch := g.waitCh()
		if ch == nil {
			return ctx.Err() == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// awaitGates blocks until the store and the broker gates are both open;
// false when ctx ended first. A lane calls it before each claim, so
// during an outage of either it queries and writes nothing.
func (w *Worker) awaitGates(ctx context.Context) bool {
	for {
		if !w.gates.store.await(ctx) || !w.gates.broker.await(ctx) {
			return false
		}
		if !w.gates.store.shut.Load() {
			return true
		}
	}
}

// spareLaneRests reports whether lane l, having dispatched out of b, waits
// for a kick instead of claiming again with the completion: a lane other
// than the lead one of a Worker with a ClaimDelay, after a batch that was
// partial (less than a full batch, nothing behind it, all of it
// dispatched). Such a Worker keeps up with one lane, which claims at most
// once per ClaimDelay; the other lanes are kicked back to work by a claim
// that finds a backlog (runLane). Without this, every lane a backlog once
// woke would go on claiming a few records per ClaimDelay, each claim
// costing the store about what a full one does, and the handler's claims
// would cost the database Lanes times what the ClaimDelay allows — time
// the realtime handler's claims wait for on a machine with few cores.
//
// Without a ClaimDelay such a lane rests after a batch below a backlog
// (backlogRecords, nothing behind it, all of it dispatched) while the
// lead lane's last claim found no backlog either: the lead lane then
// serves every partition with records in each of its claims (spread), and
// a lane that went on claiming a few records at a time took partitions
// from it, each through the claim of a single partition, which costs
// PostgreSQL several times a cycle of the lead lane (docs/performance.md).
func (w *Worker) spareLaneRests(l *lane, b *Batch, out []Outcome) bool {
	if l.lead || b.More || len(out) != len(b.Records) {
		return false
	}
	if w.cfg.ClaimDelay > 0 {
		return len(b.Records) < w.cfg.BatchSize
	}
	return len(b.Records) < w.cfg.backlogRecords() && !w.lead.backlog.Load()
}

// rotates reports whether a lane goes from partition to partition after
// a partial batch instead of going on with a partition still receiving
// records (goesOn): a Worker with a ClaimDelay, which keeps up with one
// lane claiming once per ClaimDelay. Going on with one partition for
// maxKept batches would leave the others waiting that many ClaimDelays;
// taking the one that waited longest visits each partition in turn.
func (w *Worker) rotates() bool { return w.cfg.ClaimDelay > 0 }

// runProbes runs the store's and the broker's probers until ctx ends.
func (w *Worker) runProbes(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { w.probeLoop(ctx, &w.gates.store, w.cfg.ProbeInterval, w.cfg.ProbeMaxInterval, w.pingStore) })
	if w.gates.pinger != nil {
		base := min(w.cfg.ProbeInterval, w.cfg.BrokerProbeMaxInterval)
		wg.Go(func() { w.probeLoop(ctx, &w.gates.broker, base, w.cfg.BrokerProbeMaxInterval, w.pingBroker) })
	}
	wg.Wait()
}

// probeLoop waits for g to shut, then pings until ping reports the
// dependency back (ping opens g itself), waiting probeDelay before each
// ping. An outage that comes back less than maxInterval after g opened
// continues the backoff where it was, so a dependency that answers pings
// but fails real work is not pinged ever faster.
func (w *Worker) probeLoop(ctx context.Context, g *gate, base, maxInterval time.Duration, ping func(context.Context, time.Duration) bool) {
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.shutSig:
		}
		if g.sinceOpened() < maxInterval {
			failures++
		} else {
			failures = 0
		}
		for g.shut.Load() {
			d := probeDelay(failures, base, maxInterval)
			if !wait.Sleep(ctx, d) {
				return
			}
			if !g.shut.Load() || ping(ctx, max(d, base)) {
				break // a lane's write got through, or the ping did
			}
			failures++
		}
	}
}

// pingStore pings the store; on an answer the Worker turns ready and the
// store gate opens.
func (w *Worker) pingStore(ctx context.Context, timeout time.Duration) bool {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if w.store.Ping(pctx) != nil {
		return false
	}
	w.setReady()
	return true
}

// pingBroker pings the broker; on an answer the broker gate opens.
func (w *Worker) pingBroker(ctx context.Context, timeout time.Duration) bool {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if w.gates.pinger.Ping(pctx) != nil {
		return false
	}
	w.m.brokerUp.Set(1)
	if w.gates.broker.open() {
		w.log.Info("broker available again; dispatch resumes")
	}
	return true
}

// storeDown shuts the store gate: the lanes and the stats loop wait, the
// prober pings.
func (w *Worker) storeDown() { w.gates.store.close() }

// storeUp opens the store gate.
func (w *Worker) storeUp() { w.gates.store.open() }

// sleepStoreDown sleeps d, or less if the store gate opens (the prober
// or another lane found the store back); false when ctx ended first.
func (w *Worker) sleepStoreDown(ctx context.Context, d time.Duration) bool {
	// waitCh is nil (never ready) while the gate is open.
	_, cancelled := sleepOrWake(ctx, d, w.gates.store.waitCh())
	return !cancelled
}

// sleepOrWake sleeps d, or less when wake is ready (a nil wake never is)
// or ctx ends; it reports which of the two cut the sleep short.
func sleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) (woken, cancelled bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, true
	case <-t.C:
		return false, false
	case <-wake:
		return true, false
	}
}

// brokerDown handles a batch that met a broker outage. With a Pinger the
// broker gate shuts and the lane waits at it; a lane whose previous batch
// met the outage too (the broker answered pings but not publishes) also
// backs off, as it does without a Pinger.
func (w *Worker) brokerDown(ctx context.Context, l *lane, err error) {
	if ok, suppressed := w.limit.Allow("broker"); ok {
		msg := "broker unavailable; unpublished records keep their place, dispatch paused"
		if w.pub == nil {
			msg = "handler target unavailable; undelivered records keep their place, backing off"
		}
		w.log.Warn(msg, "err", err, "suppressed", suppressed)
	}
	w.m.brokerUp.Set(0)
	l.brokerFails++
	fails := l.brokerFails
	if w.gates.pinger != nil {
		w.gates.broker.close()
		fails-- // the gate waits for the first failure
	}
	if fails <= 0 {
		return
	}
	// Without a Pinger: for as long as the target asked (Unavailable),
	// within OutageMaxDelay, or on its own schedule, else on the outage
	// backoff.
	var d time.Duration
	switch after := retryAfter(err); {
	case w.cfg.Schedule != nil:
		d = w.cfg.Schedule.Outage(fails, after)
	case after > 0:
		d = min(max(after, w.cfg.OutageBaseDelay), w.cfg.OutageMaxDelay)
	default:
		d = backoff.Outage(fails, w.cfg.OutageBaseDelay, w.cfg.OutageMaxDelay)
	}
	if w.pub == nil {
		// A handler's target (a webhook endpoint): a record committed
		// meanwhile does not bring it back, so a wake-up must not cut the
		// wait short — with records flowing it would try the endpoint at
		// every commit instead of backing off.
		wait.Sleep(ctx, d)
		return
	}
	w.waitKick(ctx, l, d)
}

// brokerUp records a batch of which the broker accepted a publish.
func (w *Worker) brokerUp(l *lane) {
	if l.brokerFails > 0 {
		l.brokerFails = 0
		w.m.brokerUp.Set(1)
	}
}

// probeDelay is the wait before a probe after failures failed ones:
// base·2^failures, at most maxInterval, less up to a quarter at random
// (so many Workers do not probe in step).
func probeDelay(failures int, base, maxInterval time.Duration) time.Duration {
	d := backoff.Exp(failures+1, base, maxInterval)
	return d - rand.N(d/4+1)
}
