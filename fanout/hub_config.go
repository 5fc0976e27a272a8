package fanout

import (
	"fmt"
	"log/slog"
	"runtime"

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

	// FanoutWorkers is how many goroutines at most hand one publication to
	// its channel's local subscribers, each a share of them, so a channel
	// with thousands of subscribers is not served one after another (a
	// subscriber may write to its socket in Deliver). The broker's
	// delivery path waits for all of them, so every subscriber still
	// receives a channel's publications in order. Default (0):
	// GOMAXPROCS; 1 serves every subscriber on the broker's goroutine.
	FanoutWorkers int

	// FanoutShare is the fewest subscribers a goroutine of FanoutWorkers
	// is given: a publication with fewer than twice as many local
	// subscribers is handed to them on the broker's goroutine alone.
	// Default (0): 256.
	FanoutShare int
}

// DefaultFanoutShare is HubConfig.FanoutShare's default.
const DefaultFanoutShare = 256

// withDefaults returns cfg with its defaults filled in, or why it is
// invalid.
func (cfg HubConfig) withDefaults() (HubConfig, error) {
	if cfg.FanoutWorkers < 0 {
		return cfg, fmt.Errorf("%w: FanoutWorkers %d is negative (0: GOMAXPROCS)", ErrInvalidConfig, cfg.FanoutWorkers)
	}
	if cfg.FanoutShare < 0 {
		return cfg, fmt.Errorf("%w: FanoutShare %d is negative (0: %d)", ErrInvalidConfig, cfg.FanoutShare, DefaultFanoutShare)
	}
	if cfg.FanoutWorkers == 0 {
		cfg.FanoutWorkers = runtime.GOMAXPROCS(0)
	}
	if cfg.FanoutShare == 0 {
		cfg.FanoutShare = DefaultFanoutShare
	}
	return cfg, nil
}
