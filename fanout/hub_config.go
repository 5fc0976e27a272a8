package fanout

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// HubConfig configures a Hub. The zero value is valid.
type HubConfig struct {
	// Logger receives the Hub's warnings (a broker that failed to
	// unsubscribe). Default: nil, nothing is logged.
	Logger *slog.Logger

	// Registerer receives the Hub's metrics: herald_hub_channels,
	// herald_hub_subscriptions (gauges), herald_hub_publications_total,
	// herald_hub_deliveries_total and herald_hub_resyncs_total (counters).
	// Default: nil, the metrics are kept but not registered.
	Registerer prometheus.Registerer
}
