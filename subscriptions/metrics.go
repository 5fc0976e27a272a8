package subscriptions

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/internal/promreg"
)

// metrics holds the subscription collectors; a nil *metrics records nothing.
type metrics struct {
	decisions                              map[Source]prometheus.Counter
	denied                                 prometheus.Counter
	webhookAllow, webhookDeny, webhookFail prometheus.Counter
	webhookCacheHits                       prometheus.Counter
	webhookSeconds                         prometheus.Observer
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	decisions := promreg.CounterVec("herald_subscriptions_decisions_total",
		"Subscription authorization decisions by result: grant, sub_token, webhook (allowed by), or denied.", "result")
	calls := promreg.CounterVec("herald_subscriptions_webhook_calls_total",
		"Authorization webhook calls by result: allow, deny, error (failed closed).", "result")
	hits := promreg.Counter("herald_subscriptions_webhook_cache_hits_total", "Webhook answers served from the cache.")
	seconds := promreg.Histogram("herald_subscriptions_webhook_duration_seconds", "Duration of authorization webhook calls.",
		.005, .01, .025, .05, .1, .25, .5, 1, 2, 5)
	r := promreg.NewRegistrar(reg, "subscriptions")
	decisions, calls = promreg.Add(r, decisions), promreg.Add(r, calls)
	hits, seconds = promreg.Add(r, hits), promreg.Add(r, seconds)
	if err := r.Err(); err != nil {
		return nil, err
	}
	return &metrics{
		decisions: map[Source]prometheus.Counter{
			SourceGrant:    decisions.WithLabelValues(string(SourceGrant)),
			SourceSubToken: decisions.WithLabelValues(string(SourceSubToken)),
			SourceWebhook:  decisions.WithLabelValues(string(SourceWebhook)),
		},
		denied:           decisions.WithLabelValues("denied"),
		webhookAllow:     calls.WithLabelValues("allow"),
		webhookDeny:      calls.WithLabelValues("deny"),
		webhookFail:      calls.WithLabelValues("error"),
		webhookCacheHits: hits,
		webhookSeconds:   seconds,
	}, nil
}

func (m *metrics) decision(d Decision) {
	if m == nil {
		return
	}
	if !d.Allowed {
		m.denied.Inc()
		return
	}
	if c, ok := m.decisions[d.Source]; ok {
		c.Inc()
	}
}

func (m *metrics) webhookCacheHit() {
	if m != nil {
		m.webhookCacheHits.Inc()
	}
}

func (m *metrics) webhookResult(allow bool, err error, d time.Duration) {
	if m == nil {
		return
	}
	m.webhookSeconds.Observe(d.Seconds())
	switch {
	case err != nil:
		m.webhookFail.Inc()
	case allow:
		m.webhookAllow.Inc()
	default:
		m.webhookDeny.Inc()
	}
}
