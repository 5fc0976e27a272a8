package outboxfeed

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// claimRequest is one Worker cycle against the store, run in one short
// transaction: record the completions of the previous batch, arm or disarm
// the wake-up trigger, then claim the next batch.
type claimRequest struct {
	owner string
	// limit is the most records claimed; 0 claims nothing.
	limit int
	lease time.Duration
	// maxAttempts > 0 dead-letters, instead of claiming, a record whose
	// expired lease brings its failed attempts to maxAttempts.
	maxAttempts int
	// window bounds how many unresolved records at the head of the line
	// the claim examines first; 0 is defaultWindow(limit).
	window int
	// cursor is where the claim's walk over channels beyond the window
	// resumes (after this channel; zero: from the first).
	cursor fanout.Key
	// complete lists leases whose records the broker accepted, completed
	// first in the same transaction.
	complete []Lease
	// completeAt, when set, is where each record of complete was when
	// claimed (claimResult.places): a hint that spares an index lookup per
	// record; a stale hint only costs that lookup.
	completeAt []string
	// asyncCommit commits with synchronous_commit off (PostgreSQL): a
	// commit lost to a server crash only causes a repeated publish.
	asyncCommit bool
	// arm > 0 arms the wake-up trigger for that long; disarm disarms it
	// (PostgreSQL with the notify trigger; ignored otherwise).
	arm    time.Duration
	disarm bool
}

// claimResult is what a cycle did.
type claimResult struct {
	claimed   []Record // in seq order, state Processing
	places    []string // PostgreSQL: the row version of each claimed record (ctid)
	exhausted []Record // dead-lettered: their expired lease used up the attempts
	// behind are claimed records that must not be published now: an
	// earlier record of their channel picked by the same claim changed
	// meanwhile and was skipped. The Worker gives them back at once.
	behind []Record
	// next is the cursor for the next claim (claimRequest.cursor).
	next      fanout.Key
	completed int // leases of the request's complete still held, now dispatched
	// completeDone says the request's complete was written even though an
	// error is returned (a Store without cycleStore writes it apart).
	completeDone bool
	// PostgreSQL only, what the next claim is sized by: records examined
	// at the head of the line, the position among them of the last one
	// claimed, how many of them wait behind a retry not yet due, and how
	// many claimable ones of channels this claim did not take were left.
	scanned, depth, stuck, spare int
}

// windowOrDefault is the window to use, at least limit.
func (r claimRequest) windowOrDefault() int {
	if r.window <= 0 {
		return defaultWindow(r.limit)
	}
	return max(r.window, r.limit)
}

// defaultWindow examines a quarter more than the batch: room for some
// records other Workers hold and for channels waiting on them (a claim
// that needs more looks further at once, see Worker.resizeWindow).
func defaultWindow(limit int) int { return limit + limit/4 + 64 }

// farClaim sizes a claim's second stage: the walk over channels whose
// records all lie beyond the window (behind another channel's burst, say).
type farClaim struct {
	reserve  int // records of the batch kept for it when the window is full
	channels int // channels it visits at most
	prefix   int // records of each channel it looks at
	spread   int // it runs only when the full window has fewer channels than this
}

// farPlan keeps a quarter of the batch for channels beyond the window, and
// visits a bounded number of channels per claim (each visit is an index
// probe, about as dear as claiming a record; the cursor carries on from
// there next time). It runs only when the window is full and held by
// fewer than farSpread channels: with more, the batch already goes out
// that many channels at a time and the line moves at that pace (oldest
// first). Batches under 4 records have no second stage.
func farPlan(limit int) farClaim {
	return farClaim{reserve: limit / 4, channels: min(16+limit/8, 128), prefix: min(max(limit/4, 1), 16), spread: farSpread}
}

// farSpread: see farPlan. Twice the default publishing concurrency.
const farSpread = 64

// maxWindowFactor bounds window growth: at most this many batches' worth
// of records are examined by one claim.
const maxWindowFactor = 256

// cycleStore is implemented by the built-in stores: the whole cycle in
// one transaction and one round trip.
type cycleStore interface {
	claimCycle(ctx context.Context, req claimRequest) (claimResult, error)
}

// claimCycle runs req on the Worker's store; a Store without cycleStore
// gets the same steps as separate calls (and the expired-lease bound is
// enforced here, with DeadLetter burning one more attempt).
func (w *Worker) claimCycle(ctx context.Context, req claimRequest) (claimResult, error) {
	if cs, ok := w.store.(cycleStore); ok {
		return cs.claimCycle(ctx, req)
	}
	var res claimResult
	if len(req.complete) > 0 {
		n, err := w.store.Complete(ctx, req.owner, req.complete)
		if err != nil {
			return res, err
		}
		res.completed, res.completeDone = n, true
	}
	if req.limit <= 0 {
		return res, nil
	}
	recs, err := w.store.Claim(ctx, req.owner, req.limit, req.lease)
	if err != nil {
		return res, err
	}
	for _, r := range recs {
		if req.maxAttempts <= 0 || r.Attempt < req.maxAttempts {
			res.claimed = append(res.claimed, r)
			continue
		}
		// Its lost leases used up its attempts: not published. If this
		// write fails the lease expires again and the next claim retries.
		reason := fmt.Sprintf("gave up after %d attempts: its lease expired", r.Attempt)
		if ok, err := w.store.DeadLetter(ctx, req.owner, r.Lease(), reason); err == nil && ok {
			r.State = DeadLetter{Reason: reason, Attempts: r.Attempt + 1, At: time.Now()}
			res.exhausted = append(res.exhausted, r)
		}
	}
	return res, nil
}
