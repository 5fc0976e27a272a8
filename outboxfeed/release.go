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
	// skipped by the broker's idempotency).
	ReleaseLeases(ctx context.Context, owners []string) (int, error)
}

// releaseLeases gives back, once every lane has ended, the leases the
// Worker still holds: a batch a completion claimed just as the Worker
// stopped, or one whose completion failed. Bounded by ShutdownTimeout; a
// store that does not answer leaves them to expire.
func (w *Worker) releaseLeases() {
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
	n, err := r.ReleaseLeases(ctx, owners)
	switch {
	case err != nil:
		w.log.Warn("outbox worker could not release its leases; they expire by themselves", "err", err,
			"lease", w.cfg.LeaseDuration)
	case n > 0:
		w.log.Info("outbox worker released its leases", "partitions", n, "took", time.Since(start))
	}
}
