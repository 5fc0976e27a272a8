package outboxfeed

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
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
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_outbox_outcomes_total",
		Help: "Claimed outbox records by outcome: success (broker accepted, completed), retry, dead_letter, lease_lost (a late update rejected by owner/fence).",
	}, []string{"result"})
	claims := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_outbox_claims_total",
		Help: "Claims the Worker made, by result: batch (a partition leased with records to dispatch) or empty (nothing to dispatch).",
	}, []string{"result"})
	m := &metrics{
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_outbox_pending",
			Help: "Outbox records not yet dispatched (state pending or processing).",
		}),
		deadLetter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_outbox_dead_letter",
			Help: "Outbox records in dead_letter.",
		}),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_outbox_oldest_pending_age_seconds",
			Help: "Age (now − occurred_at) of the oldest record not yet dispatched; 0 when none.",
		}),
		storeUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_outbox_store_up",
			Help: "1 while the outbox store answers the Worker, 0 during an outage.",
		}),
		brokerUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_outbox_broker_up",
			Help: "0 from a publish that met a broker outage until the broker answers again (a ping, or an accepted publish), else 1.",
		}),
		attempts: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "herald_outbox_attempts",
			Help:    "Delivery attempts a record needed, observed at completion (1 = first try).",
			Buckets: []float64{1, 2, 3, 4, 5, 7, 10, 15, 20},
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "herald_outbox_dispatch_duration_seconds",
			Help:    "Time from claim to recorded completion, per record.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		success:      outcomes.WithLabelValues(OutcomeSuccess),
		retry:        outcomes.WithLabelValues(OutcomeRetry),
		deadLettered: outcomes.WithLabelValues(OutcomeDeadLetter),
		leaseLost:    outcomes.WithLabelValues(OutcomeLeaseLost),
		claimBatch:   claims.WithLabelValues(ClaimBatch),
		claimEmpty:   claims.WithLabelValues(ClaimEmpty),
	}
	m.brokerUp.Set(1)
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.pending, m.deadLetter, m.oldestAge, m.storeUp, m.brokerUp, m.attempts, m.duration, outcomes, claims} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("outboxfeed: register metrics: %w", err)
	}
	return m, nil
}
