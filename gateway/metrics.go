package gateway

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/gateway/internal/session"
)

// Transport labels.
const (
	transportSSE = "sse"
	transportWS  = "ws"
)

// metrics are the gateway's Prometheus collectors.
type metrics struct {
	connections      *prometheus.GaugeVec
	connectionsMax   prometheus.Gauge
	connectionsTotal *prometheus.CounterVec
	disconnects      *prometheus.CounterVec
	refusals         *prometheus.CounterVec
	deliveries       *prometheus.CounterVec
	queueDropped     prometheus.Counter
	catchUps         *prometheus.CounterVec
	httpRequests     *prometheus.CounterVec
	limitRejections  *prometheus.CounterVec
	wsRequests       *prometheus.CounterVec
	subsEnded        *prometheus.CounterVec
	revalFailures    *prometheus.CounterVec
	revocationsAt    prometheus.Gauge
	tickets          *prometheus.CounterVec
}

// Labels of herald_limit_rejections_total: the bound that refused or
// closed; those of a connection are the connection core's
// (session.Limit*).
const (
	limitConnections = "connections"          // MaxConnections
	limitConnectRate = "connect_rate"         // ConnectAttemptsPerIP
	limitUserConns   = "connections_per_user" // MaxConnectionsPerUser
	limitUserTickets = "tickets_per_user"     // the ticket store's MaxPerUser
)

var limitLabels = []string{
	limitConnections, limitConnectRate, session.LimitMessageSize, session.LimitInflight,
	session.LimitSubscriptions, session.LimitQueue, session.LimitClientTimeout, session.LimitConnectTimeout,
	limitUserConns, limitUserTickets,
}

// Labels of herald_revalidation_failures_total: the check that failed.
const (
	checkRevocations = "revocations" // taking the revocation snapshot
	checkReauthorize = "reauthorize" // re-authorizing a subscription
)

// Labels of herald_tickets_total: what became of a ticket request.
const (
	ticketIssued   = "issued"
	ticketRefused  = "refused"  // no, bad, expired or revoked token
	ticketFailed   = "failed"   // the ticket store failed
	ticketRedeemed = "redeemed" // a ticket opened a connection's credentials
	ticketInvalid  = "invalid"  // unknown, expired or already used
)

// limit counts one rejection by the bound named limit.
func (m *metrics) limit(limit string) { m.limitRejections.WithLabelValues(limit).Inc() }

// refused counts one connection of transport refused for r before its
// stream opened. Refusals are not disconnects: herald_connections_total
// counts the streams that opened and herald_disconnects_total how each
// of those ended, so the two stay comparable.
func (m *metrics) refused(transport string, r session.Reason) {
	m.refusals.WithLabelValues(transport, r.Code).Inc()
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connections: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_connections",
			Help: "Realtime connections open now, by transport.",
		}, []string{"transport"}),
		connectionsMax: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_connections_max",
			Help: "The configured MaxConnections: realtime connections (all transports) this host accepts at once.",
		}),
		connectionsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_connections_total",
			Help: "Realtime connections accepted, by transport.",
		}, []string{"transport"}),
		disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_disconnects_total",
			Help: "Realtime connections ended, by transport and reason.",
		}, []string{"transport", "reason"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_connect_refusals_total",
			Help: "Connection attempts refused before their stream opened (refused SSE requests and WebSocket upgrades, WebSockets closed before a successful connect), by transport and reason.",
		}, []string{"transport", "reason"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_deliveries_total",
			Help: "Publications written to clients, by transport.",
		}, []string{"transport"}),
		queueDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_queue_dropped_total",
			Help: "Publications dropped by a full per-connection send queue: the connection then reads them from the channel history (herald_catch_ups_total).",
		}),
		catchUps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_catch_ups_total",
			Help: "Times a connection fell behind its send queue bound and caught up from the channel history instead of being closed, by transport.",
		}, []string{"transport"}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_http_requests_total",
			Help: "HTTP requests by route and status code; counted when the status is sent, so streams count when they start.",
		}, []string{"path", "code"}),
		limitRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_limit_rejections_total",
			Help: "Requests refused and connections closed because a configured bound was exceeded, by bound.",
		}, []string{"limit"}),
		wsRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_ws_requests_total",
			Help: "WebSocket requests answered, by op and outcome (ok or the error code).",
		}, []string{"op", "code"}),
		subsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_subscriptions_ended_total",
			Help: "Subscriptions the server ended on its own while the connection stayed (a withdrawn grant, a webhook denial, a subscription token expired or revoked), by transport and reason.",
		}, []string{"transport", "reason"}),
		revalFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_revalidation_failures_total",
			Help: "Revalidation checks that could not be made, by check: revocations (the snapshot failed; the last good one stays in force) or reauthorize (the authorizer failed; the subscription is ended).",
		}, []string{"check"}),
		revocationsAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_revocations_snapshot_timestamp_seconds",
			Help: "Unix time of the last good revocation snapshot; 0 before the first. Alert when it falls behind: revocation fails open during a store outage.",
		}),
		tickets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_tickets_total",
			Help: "Ticket requests and redemptions, by outcome: issued, refused, failed, redeemed, invalid.",
		}, []string{"outcome"}),
	}
	for _, c := range []string{checkRevocations, checkReauthorize} {
		m.revalFailures.WithLabelValues(c)
	}
	for _, o := range []string{ticketIssued, ticketRefused, ticketFailed, ticketRedeemed, ticketInvalid} {
		m.tickets.WithLabelValues(o)
	}
	for _, l := range limitLabels {
		m.limitRejections.WithLabelValues(l)
	}
	for _, t := range []string{transportSSE, transportWS} {
		m.connections.WithLabelValues(t)
		m.connectionsTotal.WithLabelValues(t)
		m.deliveries.WithLabelValues(t)
		m.catchUps.WithLabelValues(t)
		for _, r := range session.Reasons {
			m.disconnects.WithLabelValues(t, r.Code)
			m.refusals.WithLabelValues(t, r.Code)
		}
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{
		m.connections, m.connectionsMax, m.connectionsTotal, m.disconnects, m.refusals, m.deliveries, m.queueDropped, m.catchUps, m.httpRequests,
		m.limitRejections, m.wsRequests, m.subsEnded, m.revalFailures, m.revocationsAt, m.tickets,
	} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("gateway: metrics: %w (one Registerer per Server)", err)
			}
			return nil, fmt.Errorf("gateway: metrics: %w", err)
		}
	}
	return m, nil
}

// routeLabel maps a request path to the bounded set of path labels.
func routeLabel(path string) string {
	switch path {
	case "/v1/sse", "/v1/ws", "/v1/tickets", "/healthz", "/readyz", "/metrics", "/", "/client/herald.js", "/ops/status":
		return path
	}
	if strings.HasPrefix(path, "/client/") {
		return "/client/" // the client's other modules
	}
	if strings.HasPrefix(path, "/ops/") || path == "/ops" {
		return "/ops/" // the operator page and its files
	}
	return "other"
}

// statusLabel returns code as a label value: the codes the gateway sends
// by themselves, any other as its class ("4xx").
func statusLabel(code int) string {
	switch code {
	case 101, 200, 204, 304, 400, 401, 403, 404, 405, 426, 429, 500, 503:
		return strconv.Itoa(code)
	}
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code/100) + "xx"
}
