// Package webhookhandler runs a webhook endpoint (outboxfeed/webhook) as
// an outbox handler: a Deliverer for the Worker that maps each response
// class to the Worker's outcome (docs/handlers.md, "What each answer
// does"), the endpoint's retry schedule, and its metrics.
package webhookhandler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/heraldgw/herald/internal/promreg"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/webhook"

	"github.com/prometheus/client_golang/prometheus"
)

// Handler is one webhook endpoint as an outbox handler.
type Handler struct {
	ep        *webhook.Endpoint
	sched     webhook.Schedule
	responses *prometheus.CounterVec
	accepted  prometheus.Counter // responses{class="delivered",reason="accepted"}, looked up once
	duration  prometheus.Observer
}

var _ outboxfeed.Deliverer = (*Handler)(nil)

// New builds the endpoint of cfg (webhook.New: every setting checked,
// secrets read) and registers its metrics, labelled with the handler's
// name, on reg (nil: not registered).
func New(cfg webhook.Config, reg prometheus.Registerer) (*Handler, error) {
	ep, err := webhook.New(cfg)
	if err != nil {
		return nil, err
	}
	h := &Handler{
		ep:    ep,
		sched: ep.Schedule(),
		responses: promreg.CounterVec("herald_webhook_responses_total",
			"Webhook deliveries by outcome class (delivered, retryable, permanent, outage, gone, canceled) and reason.",
			"class", "reason"),
	}
	h.accepted = h.responses.WithLabelValues(webhook.ClassDelivered.String(), string(webhook.ReasonAccepted))
	hist := promreg.Histogram("herald_webhook_request_duration_seconds",
		"Time from sending a webhook request to the end of reading its answer.",
		.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30)
	h.duration = hist
	if reg != nil {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"handler": cfg.Name}, reg)
		if err := errors.Join(reg.Register(h.responses), reg.Register(hist)); err != nil {
			ep.Close()
			return nil, fmt.Errorf("webhookhandler: register metrics: %w", err)
		}
	}
	return h, nil
}

// Name is the handler's name.
func (h *Handler) Name() string { return h.ep.Name() }

// Close closes the endpoint's idle connections.
func (h *Handler) Close() { h.ep.Close() }

// String describes the handler without its secrets.
func (h *Handler) String() string { return h.ep.String() }

// WorkerConfig returns base set up for this handler: its name, its
// in-flight bound as the Worker's concurrency, its batch size, its claim delay, its retry
// schedule and disabling horizon, and a publish timeout that leaves every
// request its whole timeout. The lease stays base's: the Worker renews it
// while requests are under way, so a request may outlast it, and the
// batches of a process that died are taken over within one lease.
func (h *Handler) WorkerConfig(base outboxfeed.WorkerConfig) outboxfeed.WorkerConfig {
	cfg := h.ep.Config().WithDefaults()
	base.Handler = cfg.Name
	base.Concurrency = cfg.MaxInFlight
	base.MaxAttempts = cfg.MaxAttempts
	base.MaxAge = cfg.MaxAge
	base.Schedule = schedule{h.sched}
	base.DisableAfter = cfg.DisableAfter
	base.ClaimDelay = cfg.ClaimDelay
	base.BatchSize = cfg.BatchSize
	// A call gets between half and all of PublishTimeout, and a waiting
	// for one of the MaxInFlight slots comes on top of the request.
	base.PublishTimeout = 4*cfg.Timeout + time.Second
	return base
}

// Deliver implements outboxfeed.Deliverer.
func (h *Handler) Deliver(ctx context.Context, r *outboxfeed.Record) error {
	res := h.ep.Deliver(ctx, webhook.Message{
		ID: r.ID, Tenant: r.TenantID, Channel: r.Channel, Kind: r.Kind, Type: r.Type,
		SchemaVersion: r.SchemaVersion, Time: r.OccurredAt, Freshness: r.Freshness, Data: r.Payload,
		DataIsJSON: r.PayloadIsJSON,
	})
	if res.Class == webhook.ClassDelivered && res.Reason == webhook.ReasonAccepted {
		h.accepted.Inc()
	} else {
		h.responses.WithLabelValues(res.Class.String(), string(res.Reason)).Inc()
	}
	if res.Timestamp != 0 {
		h.duration.Observe(res.Duration.Seconds())
	}
	return Outcome(res)
}

// Outcome maps a delivery's Result to what the Worker does with the record:
// nil when delivered; Retryable (with the endpoint's Retry-After),
// Permanent, Gone, or an outage (Unavailable, with the Retry-After) — a
// canceled delivery is an outage too: nothing is known, no attempt is
// burnt.
func Outcome(res webhook.Result) error {
	err := res.Err
	if err == nil && res.Class != webhook.ClassDelivered {
		err = fmt.Errorf("webhook: %s", res.Reason)
	}
	switch res.Class {
	case webhook.ClassDelivered:
		return nil
	case webhook.ClassRetryable:
		return outboxfeed.Retryable(outboxfeed.Unavailable(err, res.RetryAfter))
	case webhook.ClassPermanent:
		return outboxfeed.Permanent(err)
	case webhook.ClassGone:
		return outboxfeed.Gone(err)
	default:
		return outboxfeed.Unavailable(err, res.RetryAfter)
	}
}

// schedule is a webhook.Schedule as the Worker's Schedule, drawing its
// jitter.
type schedule struct{ s webhook.Schedule }

func (s schedule) Retry(n int, age, retryAfter time.Duration) (time.Duration, bool) {
	return s.s.Retry(n, age, retryAfter, rand.Float64())
}

func (s schedule) Outage(f int, retryAfter time.Duration) time.Duration {
	return s.s.Outage(f, retryAfter, rand.Float64())
}
