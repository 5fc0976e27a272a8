package gateway

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Transport labels.
const (
	transportSSE = "sse"
	transportWS  = "ws"
)

// metrics are the gateway's Prometheus collectors.
type metrics struct {
	connections      *prometheus.GaugeVec
	connectionsTotal *prometheus.CounterVec
	disconnects      *prometheus.CounterVec
	deliveries       *prometheus.CounterVec
	queueDropped     prometheus.Counter
	httpRequests     *prometheus.CounterVec
	limitRejections  *prometheus.CounterVec
	wsRequests       *prometheus.CounterVec
}

// Labels of herald_limit_rejections_total: the bound that refused or closed.
const (
	limitConnections    = "connections"     // MaxConnections
	limitConnectRate    = "connect_rate"    // ConnectAttemptsPerIP
	limitMessageSize    = "message_size"    // MaxMessageSize
	limitInflight       = "inflight"        // MaxInflight
	limitSubscriptions  = "subscriptions"   // MaxSubscriptions
	limitQueue          = "queue"           // QueueMaxBytes / QueueMaxMessages
	limitClientTimeout  = "client_timeout"  // ClientTimeout
	limitConnectTimeout = "connect_timeout" // ConnectTimeout
)

var limitLabels = []string{
	limitConnections, limitConnectRate, limitMessageSize, limitInflight,
	limitSubscriptions, limitQueue, limitClientTimeout, limitConnectTimeout,
}

// limit counts one rejection by the bound named limit.
func (m *metrics) limit(limit string) { m.limitRejections.WithLabelValues(limit).Inc() }

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connections: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_connections",
			Help: "Realtime connections open now, by transport.",
		}, []string{"transport"}),
		connectionsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_connections_total",
			Help: "Realtime connections accepted, by transport.",
		}, []string{"transport"}),
		disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_disconnects_total",
			Help: "Realtime connections ended, by transport and reason.",
		}, []string{"transport", "reason"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_deliveries_total",
			Help: "Publications written to clients, by transport.",
		}, []string{"transport"}),
		queueDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_queue_dropped_total",
			Help: "Publications refused by a full per-connection send queue (the connection is closed as slow and resumes from history).",
		}),
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
	}
	for _, l := range limitLabels {
		m.limitRejections.WithLabelValues(l)
	}
	for _, t := range []string{transportSSE, transportWS} {
		m.connections.WithLabelValues(t)
		m.connectionsTotal.WithLabelValues(t)
		m.deliveries.WithLabelValues(t)
		for _, r := range Reasons {
			m.disconnects.WithLabelValues(t, r.Code)
		}
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{
		m.connections, m.connectionsTotal, m.disconnects, m.deliveries, m.queueDropped, m.httpRequests,
		m.limitRejections, m.wsRequests,
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
	case "/v1/sse", "/v1/ws", "/healthz", "/readyz", "/metrics", "/", "/client/herald.js":
		return path
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
