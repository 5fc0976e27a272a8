package outboxfeed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/internal/wait"
	"github.com/heraldgw/herald/outboxfeed/internal/backoff"
)

// lane is one claim loop of a Worker: it holds at most one partition's
// batch at a time, publishes it, and completes it together with the next
// claim. Lanes never share a lease owner (laneOwner).
type lane struct {
	owner    string
	lead     bool      // arms and disarms the wake-up trigger
	lastWork time.Time // when a claim last found records (or a wake-up came)
	armed    bool      // this lane armed the wake-up trigger
	followUp bool      // just armed: look again a few times, backing off (idle)
	armedAt  time.Time // when this lane last armed the trigger
	renewed  time.Time // when a claim of this lane last armed or renewed it
	looks    int       // looks since then (they back off, whatever is found)
	empties  int       // claims in a row that found nothing (the active poll backs off)
	// looked says the completion's claim just found nothing: the lane
	// waits before it claims again.
	looked bool
	// streak counts this lane's claims that found records since the flow
	// last paused (found): once busyStreak did, records come faster than
	// the lane claims, and the lead lane polls (polling).
	streak int
	// foundAt is when a claim of this lane last found records; quiet
	// counts the claims in a row since then that found none.
	foundAt time.Time
	quiet   int
	// polling: the lead lane stands in for wake-ups by claiming again
	// after a short wait, the trigger disarmed (polls). It starts once
	// busyStreak claims found records without a pause in the flow, and
	// ends after quietClaims claims in a row found none, or IdleAfter
	// without records: an empty claim or two in the middle of a flow do
	// not end it.
	polling bool
	kicked  chan struct{} // signalled when there may be work for this lane
	// brokerFails counts this lane's batches in a row that met a broker
	// outage (for the backoff).
	brokerFails int
	// kept counts the batches in a row this lane went on with in one
	// partition after its range was done (goesOn).
	kept int
	// backlog: the lane's last claim found a backlog (a batch with more
	// behind it, or a sixteenth of a batch): the lane takes one partition
	// at a time, and the others lanes the rest (spreads).
	backlog bool
	// cycleAt is when this lane's last claim (with a completion or
	// alone) was sent: the lead lane's next one waits until CycleInterval
	// after it while records trickle in (pace).
	cycleAt time.Time
}

// leadState is what the lanes other than the lead one know of it: when
// it last sent a claim, and whether its last claim found a backlog. While
// it claims and finds no backlog it serves every partition with records
// (spread), and the other lanes keep out of its way (spareLaneRests, idle).
type leadState struct {
	claimedAt atomic.Int64 // unix nanoseconds; 0 before its first claim
	backlog   atomic.Bool
}

// cycled records that lane l is about to send a claim.
func (w *Worker) cycled(l *lane) {
	l.cycleAt = time.Now()
	if l.lead {
		w.lead.claimedAt.Store(l.cycleAt.UnixNano())
	}
}

// setBacklog records whether lane l's last claim found a backlog.
func (w *Worker) setBacklog(l *lane, backlog bool) {
	l.backlog = backlog
	if l.lead {
		w.lead.backlog.Store(backlog)
	}
}

// leadClaimedWithin reports whether the lead lane sent a claim less than
// d ago.
func (w *Worker) leadClaimedWithin(d time.Duration) bool {
	at := w.lead.claimedAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < d
}

// pace holds lead lane l's next claim until CycleInterval after its last
// one was sent, when that claim found fewer records than a backlog (none
// included): while records trickle in, the next claim then takes the
// records committed meanwhile together instead of a claim each. A claim
// that found a backlog is followed at once, and a stop ends the wait.
func (w *Worker) pace(ctx context.Context, l *lane) {
	if d := w.paceLeft(l, l.backlog); d > 0 {
		sleepOrKick(ctx, d, nil)
	}
}

// paceLeft is how long lane l's next claim waits (pace) after a claim
// that found a backlog or not.
func (w *Worker) paceLeft(l *lane, backlog bool) time.Duration {
	if !l.lead || backlog || w.cfg.CycleInterval <= 0 || l.cycleAt.IsZero() {
		return 0
	}
	return time.Until(l.cycleAt.Add(w.cfg.CycleInterval))
}

// unkick takes back a kick (a wake-up, or another lane's) that came before
// a claim this lane is about to send: the claim sees every record committed
// before it, so a kick that came earlier would only cost an empty claim.
func (l *lane) unkick() {
	select {
	case <-l.kicked:
	default:
	}
}

// maxKept bounds how many batches in a row a lane goes on with in one busy
// partition before its completion claims whichever partition waited
// longest, so that one partition's steady flow cannot hold a lane from the
// others.
const maxKept = 16

// goesOn reports whether the completion of b, whose range is done, claims
// b's partition again rather than the one that waited longest: the
// partition is still receiving records (the batch found more than one, so
// they came faster than the lane's cycle) and the lane has not gone on
// with it maxKept times in a row. The store then keeps the lease and
// advances the position in the statement that completes b.
func goesOn(l *lane, b *Batch) bool {
	return len(b.Records) > 1 && l.kept < maxKept
}

// laneOwner is the lease owner of lane i (from 0).
func laneOwner(owner string, i int) string {
	if i == 0 {
		return owner
	}
	return owner + "/" + strconv.Itoa(i+1)
}

// runLanes runs cfg.Lanes claim loops and hands each wake-up to all of
// them. Once ctx ends and every lane has returned, it returns the batches
// the lanes hold and never began to dispatch (runLane).
func (w *Worker) runLanes(ctx context.Context, wake <-chan struct{}) []*Batch {
	lanes := make([]*lane, w.cfg.Lanes)
	for i := range lanes {
		// A lane starts as if its last claim had found a backlog, so the
		// lead lane's first claim takes one partition, as the other lanes'
		// do: a backlog there at the start (records staged while no Worker
		// ran) is then read and published by as many lanes as it has
		// partitions, not read by one lane a partition after another.
		lanes[i] = &lane{owner: laneOwner(w.cfg.Owner, i), lead: i == 0, lastWork: time.Now(), kicked: make(chan struct{}, 1), backlog: true}
	}
	kickAll := func() {
		for _, l := range lanes {
			signal(l.kicked)
		}
	}
	// A wake-up goes to the lead lane; it kicks the others when it finds a
	// backlog (runLane), so a lone record costs one claim, not one a lane.
	// Without a trigger to arm, every lane looks.
	kickWake := kickAll
	if w.armable {
		kickWake = func() { signal(lanes[0].kicked) }
	}
	var wg sync.WaitGroup
	unsent := make([][]*Batch, len(lanes))
	for i, l := range lanes {
		wg.Go(func() { unsent[i] = w.runLane(ctx, l, kickAll) })
	}
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			var all []*Batch
			for _, bs := range unsent {
				all = append(all, bs...)
			}
			return all
		case _, ok := <-wake:
			if !ok {
				wake = nil
				continue
			}
			kickWake()
		case <-w.recovered:
			kickAll()
		}
	}
}

// runLane is one lane's loop. A lane that found records claims again at
// once; one that found none waits for a wake-up (the lead lane keeps the
// trigger armed) or PollInterval, or, while records come faster than it
// claims (polls), claims again after ActivePollInterval. Once ctx ends it
// returns the batches it holds and never began to dispatch: a claim's or
// a completion's answer that came after the stop (the Worker gives them
// back as they were claimed, releaseLeases).
func (w *Worker) runLane(ctx context.Context, l *lane, kickAll func()) []*Batch {
	var bs []*Batch
	for ctx.Err() == nil {
		if len(bs) == 0 && l.looked {
			l.looked = false
			w.idle(ctx, l)
			continue
		}
		if len(bs) == 0 {
			if !w.awaitGates(ctx) || !w.yieldTurn(ctx) {
				continue
			}
			req := w.claimRequest(l, AnyPartition)
			req.Spread = w.spread(l)
			l.unkick()
			w.cycled(l)
			var err error
			bs, err = w.claim(ctx, req)
			if err != nil {
				w.setUnready(err) // the lane waits at the store gate
				continue
			}
			w.setReady()
			w.claimedAll(bs)
			w.armed(l, req)
			if len(bs) == 0 {
				w.idle(ctx, l)
				continue
			}
			w.found(l)
			if w.setBacklog(l, w.backlog(bs)); l.backlog {
				// A backlog builds: the other lanes take the other
				// partitions. Below it one lane keeps up, and fewer claims
				// of fewer records each would only cost PostgreSQL more.
				kickAll()
			}
		}
		if ctx.Err() != nil {
			break
		}
		l.lastWork = time.Now()
		if len(bs) == 1 && w.spread(l) == 1 {
			bs = one(w.work(ctx, l, bs[0]))
			continue
		}
		bs = w.workMany(ctx, l, bs)
	}
	return bs
}

// one is b as a list (none for nil).
func one(b *Batch) []*Batch {
	if b == nil {
		return nil
	}
	return []*Batch{b}
}

// backlog reports whether a claim that returned bs found a backlog.
func (w *Worker) backlog(bs []*Batch) bool {
	for _, b := range bs {
		if b.More || len(b.Records) >= w.cfg.backlogRecords() {
			return true
		}
	}
	return false
}

// spread is how many partitions lane l's next claim of any partition may
// take at once (ClaimRequest.Spread). Below a backlog, the lead lane
// serves every partition with records in one statement: a record then
// waits for the lane's current statement and its own, not for the
// statements of the partitions before it in turn. A lane with a backlog
// takes one partition at a time and the other lanes the rest, and a
// Worker with a ClaimDelay visits the partitions in turn (rotates).
func (w *Worker) spread(l *lane) int {
	if !l.lead || l.backlog || w.rotates() || w.cfg.Lanes < 2 {
		return 1
	}
	return w.cfg.Lanes
}

// claimRequest is lane l's next claim of partition part.
func (w *Worker) claimRequest(l *lane, part int) ClaimRequest {
	req := ClaimRequest{Owner: l.owner, Partition: part, Limit: w.cfg.BatchSize, Lease: w.cfg.LeaseDuration,
		Durable: w.cfg.DurableClaims, RangeLimit: w.cfg.RangeRecords}
	if l.lead {
		switch polls := w.polls(l); {
		case l.armed && polls:
			req.Disarm = true
		case !l.armed && !polls:
			req.Arm = 3 * w.cfg.PollInterval
		case l.armed && time.Since(l.renewed) >= w.cfg.PollInterval:
			// Renewed well before it lapses (three poll intervals), not by
			// every claim: each renewal is a write.
			req.Arm = 3 * w.cfg.PollInterval
		}
	}
	return req
}

// busyStreak is how many claims in a row must find records before the
// lead lane takes records to come faster than it claims (polls).
const busyStreak = 8

// quietClaims is how many claims in a row must find nothing before the
// lead lane takes the flow to have stopped: polling, it arms the wake-up
// trigger again. At 1,000 records/s in 2 ms cycles (CycleInterval) one
// claim in seven finds nothing (Poisson arrivals: e^-2), and a lane that
// armed after any empty claim had the trigger armed, producers paying
// for a NOTIFY, a third to half of a steady flow; three in a row happen
// about once a second at that rate (e^-6 of 500 cycles), fewer once
// cycles are longer. A flow that stops is seen within three polls (3 ×
// CycleInterval, 6 ms by default), and a record committed meanwhile is
// found by the next of them, so none waits longer than while polling.
const quietClaims = 3

// flowGap is the pause in a flow that restarts the streak of claims that
// found records: an empty claim, and quietClaims polls' worth of time
// (CycleInterval, at least ActivePollInterval) between the claims that
// found records around it. While the trigger is armed, each NOTIFY kicks
// the lead lane, and a kick whose record the lane's last claim already
// took costs an empty claim: at 1,000 records/s such claims came often
// enough that eight claims in a row with records, the lane's old way to
// disarm, took tens to hundreds of ms. Records that come one at a time,
// further apart than flowGap, still restart the streak at each.
func (w *Worker) flowGap() time.Duration {
	return quietClaims * max(w.cfg.CycleInterval, w.cfg.ActivePollInterval)
}

// found counts a claim of lane l that found records: one more in the
// streak, or the first of a new one after a pause (flowGap); the
// busyStreak-th makes the lane poll.
func (w *Worker) found(l *lane) {
	now := time.Now()
	if l.quiet > 0 && now.Sub(l.foundAt) >= w.flowGap() {
		l.streak = 0
	}
	l.quiet, l.empties, l.foundAt = 0, 0, now
	l.streak++
	if l.streak >= busyStreak {
		l.polling = true
	}
}

// polls reports whether lane l stands in for wake-ups by claiming again
// after a short wait when a claim found nothing: a claim found records
// less than IdleAfter ago, and either there is no wake-up trigger to arm,
// or the lane polls (busyStreak claims found records without a pause,
// and since then fewer than quietClaims in a row found none). In that
// case the lane hardly ever waits, and the lead lane disarms the trigger
// so that producers do not pay for a NOTIFY nobody waits on. Otherwise
// records that keep coming one or a few at a time wake the lane with the
// commit that stages them, instead of a poll.
func (w *Worker) polls(l *lane) bool {
	if time.Since(l.lastWork) >= w.cfg.IdleAfter {
		return false
	}
	return !w.armable || l.polling
}

// armed records what the claim did to the wake-up trigger.
func (w *Worker) armed(l *lane, req ClaimRequest) {
	switch {
	case req.Disarm:
		l.armed, l.followUp = false, false
	case req.Arm > 0:
		if !l.armed {
			// Armed because the lane does not poll (IdleAfter without
			// records): it polls again only after busyStreak claims in a
			// row found records.
			l.followUp, l.armedAt, l.looks = true, time.Now(), 0
			l.polling = false
		}
		l.armed, l.renewed = true, time.Now()
	}
}

// claim runs one claim; it is not cut off by Stop, so a committed claim
// is always seen (and then dispatched, or given back when the Worker
// stopped meanwhile: runLane) rather than left to expire. The batches'
// leases are counted from the claim's sending (Batch.leased). A claim of
// several partitions (req.Spread) goes through CompleteMany.
func (w *Worker) claim(ctx context.Context, req ClaimRequest) ([]*Batch, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.LeaseDuration/2)
	defer cancel()
	sent := time.Now()
	req = w.storeRequest(req)
	if req.Spread > 1 {
		_, bs, err := w.store.CompleteMany(cctx, nil, &req)
		for _, b := range bs {
			b.leased = sent
		}
		return bs, err
	}
	b, err := w.store.Claim(cctx, req)
	if b != nil {
		b.leased = sent
	}
	return one(b), err
}

// idle waits after a claim that found nothing.
func (w *Worker) idle(ctx context.Context, l *lane) {
	wait := w.cfg.PollInterval
	polls := w.polls(l)
	l.quiet++
	if l.quiet >= quietClaims || time.Since(l.lastWork) >= w.cfg.IdleAfter {
		// The flow stopped: a polling lead lane's next claim arms the
		// trigger.
		l.streak = 0
		if w.armable {
			l.polling, polls = false, false
		}
	}
	switch {
	case !l.lead:
		// Only the lead lane polls; the others wait for the wake-ups and
		// the kicks of a lane that found a backlog, and look on their own
		// once PollInterval passed without a claim of the lead lane (one
		// held up in a dispatch): while it claims, it serves every
		// partition with records.
	case polls && w.armable:
		// An empty claim in the middle of a flow: the trigger stays
		// disarmed and the lane claims again one CycleInterval after its
		// last claim (at least ActivePollInterval from now), not backing
		// off: quietClaims of them in a row end the polling.
		wait = max(w.cfg.ActivePollInterval, w.paceLeft(l, false))
	case polls:
		wait = activePoll(w.cfg.ActivePollInterval, w.cfg.IdleAfter, l.empties)
		l.empties++
		// An empty claim found less than a backlog: the next waits at
		// least until CycleInterval after it (pace).
		wait = max(wait, w.paceLeft(l, false))
	case !l.armed:
		// The flow stopped during the claim: the next claim arms the
		// trigger, at once, before the long wait.
		wait = w.cfg.ActivePollInterval
	case l.followUp && time.Since(l.armedAt) < w.cfg.IdleAfter:
		// A producer that saw the trigger disarmed (it sent no NOTIFY) may
		// commit after the claim that armed it: look again, backing off,
		// for IdleAfter after arming.
		wait = activePoll(w.cfg.ActivePollInterval, w.cfg.IdleAfter, l.looks)
		l.looks++
	default:
		l.followUp = false
	}
	kicked := w.waitKick(ctx, l, wait)
	for !kicked && !l.lead && ctx.Err() == nil && w.leadClaimedWithin(w.cfg.PollInterval) {
		kicked = w.waitKick(ctx, l, wait)
	}
	if kicked {
		l.lastWork = time.Now()
		l.empties = 0
	}
}

// waitKick sleeps d or until the lane is kicked; it reports a kick.
func (w *Worker) waitKick(ctx context.Context, l *lane, d time.Duration) bool {
	return sleepOrKick(ctx, d, l.kicked)
}

// work dispatches b, completes it and returns the batch the completion
// claimed next (nil when none, or when the Worker is stopping).
func (w *Worker) work(ctx context.Context, l *lane, b *Batch) *Batch {
	// The lease began when the claim was sent, however long its answer
	// took: the window for starting deliveries and the deadline of the
	// completion count from there.
	claimedAt := b.leasedAt()
	out, res := w.dispatch(ctx, b, claimedAt)
	switch {
	case res.renewLost:
		w.leaseLost("renew", len(b.Records))
		return nil // the new holder publishes the batch again
	case res.leaseLost:
		w.leaseLost("publish", len(b.Records))
		return nil
	}
	// A lane that will not claim with the completion has nothing to wait for.
	rests := w.spareLaneRests(l, b, out)
	if !rests {
		w.lingerAfter(ctx, b, claimedAt)
		w.pace(ctx, l)
	}
	var next *ClaimRequest
	// No claim rides on the completion while a gate is shut: a lane then
	// waits at the gates before it claims again (a connection that
	// survived an outage the store's pings meet would otherwise keep
	// claiming through completions).
	if ctx.Err() == nil && res.brokerErr == nil && !w.gates.broker.shut.Load() && !w.gates.store.shut.Load() && !w.yielding() && !rests {
		part := AnyPartition
		switch {
		case b.More || len(out) < len(b.Records):
			part = b.Partition
		case goesOn(l, b) && !w.rotates():
			part = b.Partition
			l.kept++
		}
		if part == AnyPartition {
			l.kept = 0
		}
		req := w.claimRequest(l, part)
		next = &req
		l.unkick()
		w.cycled(l)
	}
	held, nb, err := w.complete(ctx, b, out, next, res.leaseFrom)
	if err != nil {
		return nil // left to expire: published again (once) by the next holder
	}
	w.completed(b, out, held, claimedAt)
	l.looked = l.looked || rests
	if next != nil {
		w.claimed(nb)
		w.armed(l, *next)
		w.setBacklog(l, nb != nil && w.backlog([]*Batch{nb}))
		// A partition gone on with that turned out quiet (its lease went
		// back): the others may have records, so the lane claims again at
		// once instead of waiting.
		l.looked = nb == nil && (l.kept == 0 || !held)
		if nb != nil {
			w.found(l)
		} else {
			l.kept = 0
		}
	}
	failure := res.brokerErr
	if failure == nil {
		failure = res.failure
	}
	w.observe(ctx, failure, res.published, res.observedAt(claimedAt))
	if res.brokerErr != nil {
		w.brokerDown(ctx, l, res.brokerErr)
		return nil
	}
	if res.published {
		w.brokerUp(l)
	}
	return nb
}

// lingerAfter waits, after b was dispatched, until ClaimDelay after its
// claim when b found less than a full batch and nothing behind it (or
// until ctx ends): the completion's claim then takes the records
// committed meanwhile together.
func (w *Worker) lingerAfter(ctx context.Context, b *Batch, claimedAt time.Time) {
	if w.cfg.ClaimDelay <= 0 || b.More || len(b.Records) >= w.cfg.BatchSize {
		return
	}
	d := time.Until(claimedAt.Add(w.cfg.ClaimDelay))
	if d <= 0 {
		return
	}
	wait.Sleep(ctx, d)
}

// complete writes b's outcomes (and claims next), retrying store errors
// with backoff until the lease, which last began at leaseFrom (the claim
// or its last renewal), would have run out, or for at most
// ShutdownTimeout once the Worker is stopping. An outage shorter than the
// lease thus loses nothing and publishes nothing twice.
func (w *Worker) complete(ctx context.Context, b *Batch, out []Outcome, next *ClaimRequest, leaseFrom time.Time) (held bool, nb *Batch, err error) {
	if next != nil {
		n := w.storeRequest(*next)
		next = &n
	}
	err = w.settle(ctx, leaseFrom, func(c context.Context) (err error) {
		sent := time.Now()
		held, nb, err = w.store.Complete(c, b, out, next)
		if nb != nil {
			nb.leased = sent
		}
		return err
	})
	return held, nb, err
}

// settle runs write, a store write settling batches whose (shortest) lease
// began at leaseFrom, as complete describes.
func (w *Worker) settle(ctx context.Context, leaseFrom time.Time, write func(context.Context) error) error {
	wctx, cancel := w.settleContext(ctx, leaseFrom)
	defer cancel()
	err := w.persist(wctx, leaseFrom, write)
	if err != nil && ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		// The lease ran out while the completion was in flight or before it
		// was tried: a process paused past its lease (SIGSTOP, a VM frozen, a
		// long GC pause) finds its deadline gone when it runs again. One
		// more fenced attempt settles the batch: it completes it if nobody
		// took the partition over, and is refused (lease_lost) if somebody did.
		lctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseDuration/2)
		err = write(lctx)
		cancel()
	}
	if err == nil {
		w.setReady()
	}
	return err
}

// claimedAll counts a claim that returned bs: each batch, or one claim
// that found nothing.
func (w *Worker) claimedAll(bs []*Batch) {
	if len(bs) == 0 {
		w.claimed(nil)
	}
	for _, b := range bs {
		w.claimed(b)
	}
}

// claimed counts a claim that returned b (nil: nothing to dispatch).
func (w *Worker) claimed(b *Batch) {
	w.leadClaimed(b)
	if b == nil {
		w.m.claimEmpty.Inc()
		return
	}
	w.m.claimBatch.Inc()
}

// completed records the metrics and logs of a completed batch.
func (w *Worker) completed(b *Batch, out []Outcome, held bool, claimedAt time.Time) {
	if !held {
		w.leaseLost("complete", len(out))
		return
	}
	elapsed := time.Since(claimedAt).Seconds()
	var ok, bad int
	for i := range out {
		r := &b.Records[i]
		switch out[i].Kind {
		case OutcomeDone:
			if out[i].Passed {
				w.m.passed.Inc()
				continue
			}
			ok++
			w.m.attempts.Observe(float64(r.Attempt + 1))
			w.m.duration.Observe(elapsed)
		case OutcomeRetryLater:
			bad++
			w.m.retry.Inc()
		case OutcomeDeadLettered:
			bad++
			w.m.deadLettered.Inc()
			w.log.Warn("outbox record dead-lettered", "id", r.ID, "tenant", r.TenantID, "channel", r.Channel,
				"type", r.Type, "schema_version", r.SchemaVersion, "reason", out[i].Err)
		}
	}
	w.m.success.Add(float64(ok))
	w.health.count(ok, bad)
}

// leaseLost counts records whose outcome the store refused (or the broker
// fenced off, or a renewal of their lease found it lost: op says which)
// because another Worker took the partition over.
func (w *Worker) leaseLost(op string, n int) {
	if n <= 0 {
		return
	}
	w.m.leaseLost.Add(float64(n))
	if ok, suppressed := w.limit.Allow("lease_lost"); ok {
		w.log.Warn("lease lost: another worker holds the partition", "op", op, "records", n, "suppressed", suppressed)
	}
}

// persist runs a store write, retrying store errors with backoff until ctx
// ends; it marks the store unready while failing, and retries at once when
// the store's prober finds it back. The backoff never
// sleeps past the middle of what is left of the lease that began at
// leaseFrom, so a short outage does not outlast the lease.
func (w *Worker) persist(ctx context.Context, leaseFrom time.Time, write func(context.Context) error) error {
	for failures := 1; ; failures++ {
		err := write(ctx)
		if err == nil {
			return nil
		}
		w.setUnready(err)
		if ctx.Err() != nil {
			return err
		}
		d := backoff.Outage(failures, w.cfg.OutageBaseDelay, w.cfg.OutageMaxDelay)
		if left := time.Until(leaseFrom.Add(w.cfg.LeaseDuration)); d > left/4 {
			d = max(left/4, w.cfg.OutageBaseDelay)
		}
		if !w.sleepStoreDown(ctx, d) {
			return err
		}
	}
}

// settleContext outlives ctx (outcomes are written even while stopping) but
// ends at the lease deadline (at least ShutdownTimeout from now) or
// ShutdownTimeout after ctx ends, whichever comes first.
func (w *Worker) settleContext(ctx context.Context, leaseFrom time.Time) (context.Context, context.CancelFunc) {
	deadline := leaseFrom.Add(w.cfg.LeaseDuration)
	if floor := time.Now().Add(w.cfg.ShutdownTimeout); deadline.Before(floor) {
		deadline = floor
	}
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	var mu sync.Mutex
	var timer *time.Timer
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		timer = time.AfterFunc(w.cfg.ShutdownTimeout, cancel)
		mu.Unlock()
	})
	return wctx, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// poisonReason is the dead-letter reason of a record whose batches kept
// being taken over.
func poisonReason(takeovers int) string {
	return fmt.Sprintf("gave up after %d attempts: its lease expired", takeovers)
}

// activePoll is the wait before the next claim of a busy lane whose last
// empties claims in a row found nothing: base, doubled for each, at most
// idleAfter/4 (and never below base).
func activePoll(base, idleAfter time.Duration, empties int) time.Duration {
	d := base
	for range min(empties, 30) {
		if d >= idleAfter/4 {
			break
		}
		d *= 2
	}
	return max(base, min(d, idleAfter/4))
}
