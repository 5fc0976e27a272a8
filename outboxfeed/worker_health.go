package outboxfeed

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// health is what a Worker knows of its handler's target: whether it is
// failing continuously, since when (kept in the store, so every Worker of
// the handler and a restarted one agree), and the success counts behind
// herald_outbox_success_ratio.
type health struct {
	mu      sync.Mutex
	failing bool
	since   time.Time
	// last is when the batch of the latest observation was claimed: lanes
	// finish in any order, and a batch claimed before it (a failure that
	// was under way when the target came back) says nothing newer.
	last    time.Time
	ok, bad int64 // attempts since the last stats refresh
}

// observe records the result of one dispatched batch, claimed at
// claimedAt: failure is the error of an outage or of a record's retryable
// failure, succeeded says a delivery went through. It marks the handler
// failing (or not) in the store on a change, disables it once it has
// failed for DisableAfter, and disables it at once when the target is
// gone. A batch claimed before the last one observed changes nothing.
func (w *Worker) observe(ctx context.Context, failure error, succeeded bool, claimedAt time.Time) {
	if w.cfg.Handler == RealtimeHandler || w.hs == nil || (failure == nil && !succeeded) {
		return
	}
	if failure != nil && classify(failure) == failureGone {
		w.disable(ctx, claimedAt, fmt.Sprintf("the target is gone: %v", failure))
		return
	}
	h := &w.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if claimedAt.Before(h.last) {
		return
	}
	switch {
	case succeeded && h.failing:
		if _, err := w.hs.MarkFailing(ctx, w.cfg.Handler, false, ""); err != nil {
			return // the store is down: tried again with the next success
		}
		h.last = claimedAt
		h.failing, h.since = false, time.Time{}
		w.m.targetUp.Set(1)
		w.log.Info("handler target accepts deliveries again")
	case failure != nil && !succeeded:
		since, err := w.hs.MarkFailing(ctx, w.cfg.Handler, true, failure.Error())
		if err != nil {
			return
		}
		h.last = claimedAt
		if !h.failing {
			h.failing, h.since = true, since
			w.m.targetUp.Set(0)
			w.log.Warn("handler target failing", "since", since, "err", failure)
		}
		if w.cfg.DisableAfter > 0 && !since.IsZero() && time.Since(since) >= w.cfg.DisableAfter {
			w.disable(ctx, claimedAt, fmt.Sprintf("failing continuously since %s: %v", since.UTC().Format(time.RFC3339), failure))
		}
	case succeeded:
		h.last = claimedAt
	}
}

// disable disables the Worker's handler, on the failure of a batch
// claimed at claimedAt: its records wait until an operator enables it
// (herald handlers enable). A handler whose state changed after the batch
// was claimed (an operator enabled it while the request that failed was
// under way) is left as it is: that failure is older than the decision.
// The store checks that in the write itself, so a decision taken while
// the Worker disables cannot be overwritten.
func (w *Worker) disable(ctx context.Context, claimedAt time.Time, reason string) {
	done, err := w.hs.DisableHandler(ctx, w.cfg.Handler, reason, claimedAt)
	if err != nil {
		w.log.Warn("could not disable the handler", "err", err)
		return
	}
	if !done {
		return
	}
	w.m.disabled.Set(1)
	w.m.targetUp.Set(0)
	w.log.Error("handler disabled; its records wait until `herald handlers enable "+w.cfg.Handler+"`", "reason", reason)
}

// count adds a batch's outcomes to the success ratio.
func (h *health) count(ok, bad int) {
	h.mu.Lock()
	h.ok += int64(ok)
	h.bad += int64(bad)
	h.mu.Unlock()
}

// ratio returns the success ratio since the last call (1 when nothing
// was attempted) and starts a new interval.
func (h *health) ratio() float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	ok, bad := h.ok, h.bad
	h.ok, h.bad = 0, 0
	if ok+bad == 0 {
		return 1
	}
	return float64(ok) / float64(ok+bad)
}
