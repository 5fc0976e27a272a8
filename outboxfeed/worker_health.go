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
	// last is when the delivery call of the latest observation began:
	// lanes finish in any order, and a call begun before it (a failure
	// under way when the target came back) says nothing newer.
	last    time.Time
	ok, bad int64 // attempts since the last stats refresh
	// recovered says a delivery went through while failing: the store is
	// told so by recordRecovery, again on each stats refresh until it
	// answers (the last records may have gone out while it was down).
	recovered bool

	// gauges guards herald_outbox_target_up and _handler_disabled: a
	// Worker's own observation bumps gen, and a stats refresh whose
	// reading of the store began before it leaves the gauges alone (its
	// reading is older than what the Worker just saw).
	gauges sync.Mutex
	gen    uint64
}

// setGauges sets the target and disabled gauges from the Worker's own
// observation (nil leaves one as it is).
func (w *Worker) setGauges(up, disabled *float64) {
	h := &w.health
	h.gauges.Lock()
	defer h.gauges.Unlock()
	h.gen++
	if up != nil {
		w.m.targetUp.Set(*up)
	}
	if disabled != nil {
		w.m.disabled.Set(*disabled)
	}
}

// gaugeGen returns the observation count a stats refresh starts from.
func (h *health) gaugeGen() uint64 {
	h.gauges.Lock()
	defer h.gauges.Unlock()
	return h.gen
}

// refreshGauges sets the gauges from a reading of the store begun at
// observation count gen, unless the Worker observed its target since.
func (w *Worker) refreshGauges(gen uint64, up, disabled float64) {
	h := &w.health
	h.gauges.Lock()
	defer h.gauges.Unlock()
	if h.gen != gen {
		return
	}
	w.m.targetUp.Set(up)
	w.m.disabled.Set(disabled)
}

var gaugeOn, gaugeOff = 1.0, 0.0

// observe records the result of one dispatched batch whose delivery call
// that decides it began at at: failure is the error of an outage or of a
// record's retryable failure, succeeded says a delivery went through. It
// marks the handler failing (or not) in the store on a change, disables
// it once it has failed for DisableAfter, and disables it at once when
// the target is gone. A call that began before the last one observed
// changes nothing (a failure under way when the target came back).
func (w *Worker) observe(ctx context.Context, failure error, succeeded bool, at time.Time) {
	if w.cfg.Handler == RealtimeHandler || w.hs == nil || (failure == nil && !succeeded) {
		return
	}
	if failure != nil && classify(failure) == failureGone {
		w.disable(ctx, at, fmt.Sprintf("the target is gone: %v", failure))
		return
	}
	h := &w.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if at.Before(h.last) {
		return
	}
	switch {
	case succeeded && h.failing:
		h.last = at
		h.recovered = true
		w.recordRecovery(ctx)
	case failure != nil && !succeeded:
		since, err := w.hs.MarkFailing(ctx, w.cfg.Handler, true, failure.Error())
		if err != nil {
			return
		}
		h.last = at
		h.recovered = false
		if !h.failing {
			h.failing, h.since = true, since
			w.setGauges(&gaugeOff, nil)
			w.log.Warn("handler target failing", "since", since, "err", failure)
		}
		if w.cfg.DisableAfter > 0 && !since.IsZero() && time.Since(since) >= w.cfg.DisableAfter {
			w.disable(ctx, at, fmt.Sprintf("failing continuously since %s: %v", since.UTC().Format(time.RFC3339), failure))
		}
	case succeeded:
		h.last = at
	}
}

// recordRecovery tells the store that the target accepts deliveries
// again; h.mu is held. A store that does not answer is told on the next
// success or stats refresh.
func (w *Worker) recordRecovery(ctx context.Context) {
	h := &w.health
	if !h.failing || !h.recovered {
		return
	}
	if _, err := w.hs.MarkFailing(ctx, w.cfg.Handler, false, ""); err != nil {
		return
	}
	h.failing, h.since, h.recovered = false, time.Time{}, false
	w.setGauges(&gaugeOn, nil)
	w.log.Info("handler target accepts deliveries again")
}

// retryRecovery records a recovery the store did not take when it was
// observed.
func (w *Worker) retryRecovery(ctx context.Context) {
	w.health.mu.Lock()
	defer w.health.mu.Unlock()
	w.recordRecovery(ctx)
}

// disable disables the Worker's handler, on the failure of a delivery
// call begun at at: its records wait until an operator enables it
// (herald handlers enable). A handler whose state changed after the call
// began (an operator enabled it while the request that failed was under
// way) is left as it is: that failure is older than the decision.
// The store checks that in the write itself, so a decision taken while
// the Worker disables cannot be overwritten.
func (w *Worker) disable(ctx context.Context, at time.Time, reason string) {
	done, err := w.hs.DisableHandler(ctx, w.cfg.Handler, reason, at)
	if err != nil {
		w.log.Warn("could not disable the handler", "err", err)
		return
	}
	if !done {
		return
	}
	w.setGauges(&gaugeOff, &gaugeOn)
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
