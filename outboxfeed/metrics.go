package outboxfeed

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/internal/promreg"
)

// Outcome label values of herald_outbox_outcomes_total.
const (
	OutcomeSuccess    = "success"
	OutcomeRetry      = "retry"
	OutcomeDeadLetter = "dead_letter"
	OutcomeLeaseLost  = "lease_lost"
)

// Result label values of herald_outbox_claims_total.
const (
	ClaimBatch = "batch" // the claim leased a partition with records to dispatch
	ClaimEmpty = "empty" // nothing to dispatch: no lease taken, nothing written
)

type metrics struct {
	pending      prometheus.Gauge
	deadLetter   prometheus.Gauge
	oldestAge    prometheus.Gauge
	storeUp      prometheus.Gauge
	brokerUp     prometheus.Gauge
	attempts     prometheus.Histogram
	duration     prometheus.Histogram
	success      prometheus.Counter
	retry        prometheus.Counter
	deadLettered prometheus.Counter
	leaseLost    prometheus.Counter
	claimBatch   prometheus.Counter
	claimEmpty   prometheus.Counter
	passed       prometheus.Counter
	unrouted     prometheus.Counter
	targetUp     prometheus.Gauge
	disabled     prometheus.Gauge
	successRatio prometheus.Gauge
}

// newMetrics makes a Worker's metrics, each labelled handler="<name>".
func newMetrics(reg prometheus.Registerer, handler string) (*metrics, error) {
	if reg != nil {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"handler": handler}, reg)
	}
	outcomes := promreg.CounterVec("herald_outbox_outcomes_total",
		"Claimed outbox records by outcome: success (broker accepted, completed), retry, dead_letter, lease_lost (a late update rejected by owner/fence).",
		"result")
	claims := promreg.CounterVec("herald_outbox_claims_total",
		"Claims the Worker made, by result: batch (a partition leased with records to dispatch) or empty (nothing to dispatch).",
		"result")
	m := &metrics{
		pending:    promreg.Gauge("herald_outbox_pending", "Outbox records not yet dispatched (state pending or processing)."),
		deadLetter: promreg.Gauge("herald_outbox_dead_letter", "Outbox records in dead_letter."),
		oldestAge:  promreg.Gauge("herald_outbox_oldest_pending_age_seconds", "Age (now − occurred_at) of the oldest record not yet dispatched; 0 when none."),
		storeUp:    promreg.Gauge("herald_outbox_store_up", "1 while the outbox store answers the Worker, 0 during an outage."),
		brokerUp:   promreg.Gauge("herald_outbox_broker_up", "0 from a publish that met a broker outage until the broker answers again (a ping, or an accepted publish), else 1."),
		attempts: promreg.Histogram("herald_outbox_attempts",
			"Delivery attempts a record needed, observed at completion (1 = first try).",
			1, 2, 3, 4, 5, 7, 10, 15, 20),
		duration: promreg.Histogram("herald_outbox_dispatch_duration_seconds",
			"Time from the sending of the claim to the recorded completion, per record.",
			.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10),
		success:      outcomes.WithLabelValues(OutcomeSuccess),
		retry:        outcomes.WithLabelValues(OutcomeRetry),
		deadLettered: outcomes.WithLabelValues(OutcomeDeadLetter),
		leaseLost:    outcomes.WithLabelValues(OutcomeLeaseLost),
		claimBatch:   claims.WithLabelValues(ClaimBatch),
		claimEmpty:   claims.WithLabelValues(ClaimEmpty),
		passed:       promreg.Counter("herald_outbox_passed_total", "Outbox records the handler's routes passed over (not delivered to it, nothing written)."),
		unrouted:     promreg.Counter("herald_outbox_unrouted_total", "Outbox records routed to no handler at all (counted by the realtime handler's Worker)."),
		targetUp:     promreg.Gauge("herald_outbox_target_up", "1 while the handler's target (broker, webhook endpoint, Go handler) accepts deliveries, 0 while it fails continuously."),
		disabled:     promreg.Gauge("herald_outbox_handler_disabled", "1 while the handler is disabled (its target answered 410 Gone or failed past disable_after); its records wait until an operator enables it."),
		successRatio: promreg.Gauge("herald_outbox_success_ratio", "Share of the handler's completed delivery attempts that succeeded over the last stats interval (1 when there were none)."),
	}
	m.brokerUp.Set(1)
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.pending, m.deadLetter, m.oldestAge, m.storeUp, m.brokerUp, m.attempts, m.duration, outcomes, claims,
		m.passed, m.unrouted, m.targetUp, m.disabled, m.successRatio} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("outboxfeed: register metrics: %w", err)
	}
	return m, nil
}
