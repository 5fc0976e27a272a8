package outboxfeed

import (
	"context"
	"time"
)

// LeaseReleaser is implemented by a Store that can end a stopped
// Worker's leases at once (both stores do): another Worker, or the same
// process restarted, then claims their partitions without waiting for
// the leases to expire.
type LeaseReleaser interface {
	// ReleaseLeases ends now every lease of the handler held under one of
	// owners, and reports how many it ended. It is conditional on the
	// owner, whose name no other Worker uses: a lease taken over meanwhile
	// is untouched. A partition whose batch was claimed and not completed
	// stays so: the next claim takes it over, as after an expiry (the
	// records of that batch published before the stop, if any, are
	// skipped by the broker's idempotency). A batch the Worker knows it
	// never began to dispatch goes back first (BatchReturner).
	ReleaseLeases(ctx context.Context, owners []string) (int, error)
}

// BatchReturner is implemented by a Store that can take back batches a
// stopping Worker claimed and never began to dispatch (both stores do):
// the next claim of their partitions is then no takeover, and counts no
// attempt against their records.
type BatchReturner interface {
	// ReturnBatches gives back each of bs whose partition the batch's
	// owner still holds under the batch's fence with the claim open, and
	// reports how many it gave back. None of the batch's records may have
	// been handed to the target. The partition is left as the claim found
	// it: its position does not move, nothing enters the retry queue, and
	// the next claim reads the same records. A batch that was itself a
	// takeover stays one with the count it had: the next claim takes it
	// over as the same takeover (the count does not grow, nor start
	// again). The fence stays, so a late write under it fails; a
	// partition another Worker took over meanwhile (its fence moved) is
	// untouched.
	ReturnBatches(ctx context.Context, bs []*Batch) (int, error)
}

// releaseLeases gives back, once every lane has ended, the batches the
// lanes claimed and never dispatched (a completion claimed them just as
// the Worker stopped: unsent), then the leases the Worker still holds (a
// batch whose completion failed, say, whose records may have been
// published: the next holder takes it over). Bounded by ShutdownTimeout;
// a store that does not answer leaves them to expire.
func (w *Worker) releaseLeases(unsent []*Batch) {
	r, ok := w.store.(LeaseReleaser)
	if !ok {
		return
	}
	owners := make([]string, w.cfg.Lanes)
	for i := range owners {
		owners[i] = laneOwner(w.cfg.Owner, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.ShutdownTimeout)
	defer cancel()
	start := time.Now()
	if br, ok := w.store.(BatchReturner); ok && len(unsent) > 0 {
		n, err := br.ReturnBatches(ctx, unsent)
		switch {
		case err != nil:
			w.log.Warn("outbox worker could not give back the batches it had not dispatched; the next claim takes them over",
				"err", err, "batches", len(unsent))
		case n > 0:
			w.log.Info("outbox worker gave back the batches it had not dispatched", "batches", n)
		}
	}
	n, err := r.ReleaseLeases(ctx, owners)
	switch {
	case err != nil:
		w.log.Warn("outbox worker could not release its leases; they expire by themselves", "err", err,
			"lease", w.cfg.LeaseDuration)
	case n > 0:
		w.log.Info("outbox worker released its leases", "partitions", n, "took", time.Since(start))
	}
}
