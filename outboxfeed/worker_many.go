package outboxfeed

import (
	"context"
	"time"
)

// workMany dispatches the batches lane l holds (one partition each), then
// completes them all and claims again in one store step (CompleteMany),
// and returns the batches that step claimed. Below a backlog (spread)
// every partition goes on: one that received records meanwhile keeps its
// lease and its next range is read in the completing statement, one that
// did not is kept (as a batch of no records) while another of the step
// received some, and given back otherwise; the step then takes the free
// partitions with records. With a backlog only the partitions whose range
// is not done go on, so the others go to the other lanes.
func (w *Worker) workMany(ctx context.Context, l *lane, bs []*Batch) []*Batch {
	cs := make([]Completion, 0, len(bs))
	claimedAts := make([]time.Time, 0, len(bs))
	results := make([]dispatchResult, 0, len(bs))
	var brokerErr error
	for _, b := range bs {
		claimedAt := b.leasedAt()
		var out []Outcome
		var res dispatchResult
		if brokerErr != nil {
			// The broker is down: the rest keep their place (as dispatch
			// holds a batch's records after an outage).
			out, res = holdAll(b), dispatchResult{leaseFrom: claimedAt}
		} else {
			out, res = w.dispatch(ctx, b, claimedAt)
		}
		switch {
		case res.renewLost:
			w.leaseLost("renew", len(b.Records))
			continue // the new holder publishes the batch again
		case res.leaseLost:
			w.leaseLost("publish", len(b.Records))
			continue
		}
		if res.brokerErr != nil && brokerErr == nil {
			brokerErr = res.brokerErr
		}
		cs = append(cs, Completion{Batch: b, Out: out})
		claimedAts = append(claimedAts, claimedAt)
		results = append(results, res)
	}
	if len(cs) == 0 {
		return nil
	}
	w.pace(ctx, l)
	var next *ClaimRequest
	if ctx.Err() == nil && brokerErr == nil && !w.gates.broker.shut.Load() && !w.gates.store.shut.Load() && !w.yielding() {
		req := w.claimRequest(l, AnyPartition)
		req.Spread = w.spread(l)
		req.Hold = req.Spread > 1
		next = &req
		for i := range cs {
			b := cs[i].Batch
			cs[i].GoOn = req.Spread > 1 || b.More || len(cs[i].Out) < len(b.Records)
		}
		l.unkick()
		w.cycled(l)
	}
	// The completion must land within the shortest of the leases.
	leaseFrom := results[0].leaseFrom
	for _, r := range results[1:] {
		if r.leaseFrom.Before(leaseFrom) {
			leaseFrom = r.leaseFrom
		}
	}
	held, nbs, err := w.completeMany(ctx, cs, next, leaseFrom)
	if err != nil {
		return nil // left to expire: published again (once) by the next holders
	}
	for i, c := range cs {
		w.completed(c.Batch, c.Out, held[i], claimedAts[i])
	}
	l.kept = 0
	if next != nil {
		w.claimedAll(withRecords(nbs))
		w.armed(l, *next)
		l.looked = len(nbs) == 0
		if len(nbs) > 0 {
			w.found(l)
		}
		w.setBacklog(l, w.backlog(nbs))
	}
	published := false
	for i, res := range results {
		failure := res.brokerErr
		if failure == nil {
			failure = res.failure
		}
		w.observe(ctx, failure, res.published, res.observedAt(claimedAts[i]))
		published = published || res.published
	}
	if brokerErr != nil {
		w.brokerDown(ctx, l, brokerErr)
		return nil
	}
	if published {
		w.brokerUp(l)
	}
	return nbs
}

// withRecords is bs without the batches of no records that a step's Hold
// kept (ClaimRequest.Hold): those are not claims that found records.
func withRecords(bs []*Batch) []*Batch {
	var out []*Batch
	for _, b := range bs {
		if len(b.Records) > 0 || b.More || len(b.Blocked) > 0 {
			out = append(out, b)
		}
	}
	return out
}

// holdAll is the outcomes of b's records none of which was attempted.
func holdAll(b *Batch) []Outcome {
	out := make([]Outcome, len(b.Records))
	for i := range out {
		out[i] = Outcome{Kind: OutcomeHold}
	}
	return out
}

// completeMany is complete for several batches (CompleteMany), retrying
// store errors until the shortest of their leases, which began at
// leaseFrom, would have run out.
func (w *Worker) completeMany(ctx context.Context, cs []Completion, next *ClaimRequest, leaseFrom time.Time) (held []bool, nbs []*Batch, err error) {
	if next != nil {
		n := w.storeRequest(*next)
		next = &n
	}
	err = w.settle(ctx, leaseFrom, func(c context.Context) (err error) {
		sent := time.Now()
		held, nbs, err = w.store.CompleteMany(c, cs, next)
		for _, nb := range nbs {
			nb.leased = sent
		}
		return err
	})
	return held, nbs, err
}
