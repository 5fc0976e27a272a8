package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Defaults of RedisConfig, exported for docs and the CLI.
const (
	DefaultRedisKeyPrefix           = "herald:"
	DefaultRedisClientName          = "herald"
	DefaultRedisHealthCheckInterval = 5 * time.Second
)

// RedisConfig configures a RedisBroker. The zero value of every field but
// URL means its documented default.
type RedisConfig struct {
	// URL of the Redis server: redis://[user:pass@]host:port/db,
	// rediss://… for TLS, or unix://…; go-redis URL options such as
	// ?dial_timeout=3s&client_name=x are accepted. The client name defaults
	// to "herald" (visible in CLIENT LIST). Required.
	//
	// With Cluster set, the URL names one seed node of a Redis Cluster,
	// redis://[user:pass@]host:port?addr=host2:port2&…, as go-redis's
	// ParseClusterURL reads it (no database number, no unix sockets).
	URL string

	// Cluster talks to a Redis Cluster (Redis ≥ 7): commands go to the
	// primary that owns each channel's slot, and pub/sub is sharded
	// (Cluster implies Sharded), with one SSUBSCRIBE connection per
	// primary that owns subscribed channels, opened on demand and closed
	// when it has none left. Channels whose slot moves to another primary
	// (resharding, failover) are subscribed there and resynced. Default
	// false: one server (or a proxy), one pub/sub connection.
	Cluster bool

	// KeyPrefix starts every key and pub/sub channel name Herald uses.
	// It must not contain '{' or '}' (the rest of each name is a Redis
	// Cluster hash tag). Default "herald:".
	KeyPrefix string

	// HistorySize is how many of its latest publications each channel's
	// stream keeps for Recover, trimmed exactly (XADD MAXLEN n, not ~).
	// Default 1000.
	HistorySize int

	// HistoryTTL is how long a channel with no publication keeps its
	// stream and epoch: every publication sets this expiry on both keys.
	// An expired channel starts over with a new epoch. Default 24h.
	HistoryTTL time.Duration

	// Sharded uses sharded pub/sub (SPUBLISH/SSUBSCRIBE, Redis ≥ 7) rather
	// than PUBLISH/SUBSCRIBE, so a Redis Cluster sends each publication
	// only within its channel's shard. Every node of a deployment must use
	// the same setting. Default false; always true with Cluster.
	Sharded bool

	// HealthCheckInterval is how long a pub/sub connection may stay
	// silent before it is pinged; a connection that does not answer within
	// a second interval is replaced (and its channels resynced). Default 5s.
	HealthCheckInterval time.Duration

	// Logger receives connection and decode problems (rate-limited).
	// Default: nil, nothing is logged.
	Logger *slog.Logger

	// Registerer receives the broker's metrics:
	// herald_redis_pubsub_messages_total,
	// herald_redis_pubsub_decode_errors_total and
	// herald_redis_pubsub_reconnects_total (counters). Default: nil, the
	// metrics are kept but not registered.
	Registerer prometheus.Registerer

	// dialer, when set (by tests), opens every connection to Redis in
	// place of go-redis's own dialer.
	dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (c RedisConfig) withDefaults() RedisConfig {
	if c.Cluster {
		// A cluster broadcasts unsharded pub/sub to every node: sharded is
		// the only mode that scales with it.
		c.Sharded = true
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultRedisKeyPrefix
	}
	if c.HistorySize == 0 {
		c.HistorySize = DefaultHistorySize
	}
	if c.HistoryTTL == 0 {
		c.HistoryTTL = DefaultHistoryTTL
	}
	if c.HealthCheckInterval == 0 {
		c.HealthCheckInterval = DefaultRedisHealthCheckInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks c and returns the client for its URL (not connected).
func (c RedisConfig) validate() (redis.UniversalClient, error) {
	if c.URL == "" {
		return nil, fmt.Errorf("fanout: redis config: %w: URL is empty", ErrInvalidConfig)
	}
	var (
		opt  *redis.Options
		copt *redis.ClusterOptions
		err  error
	)
	if c.Cluster {
		copt, err = redis.ParseClusterURL(c.URL)
	} else {
		opt, err = redis.ParseURL(c.URL)
	}
	if err != nil {
		// A *url.Error quotes the whole URL, password included: keep only
		// its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("fanout: redis config: %w: URL: %v", ErrInvalidConfig, err)
	}
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		return nil, fmt.Errorf("fanout: redis config: %w: KeyPrefix %q: must not contain '{' or '}'", ErrInvalidConfig, c.KeyPrefix)
	}
	if c.HistorySize < 1 {
		return nil, fmt.Errorf("fanout: redis config: %w: HistorySize %d: must be ≥ 1 (0 means %d)", ErrInvalidConfig, c.HistorySize, DefaultHistorySize)
	}
	if c.HistoryTTL < time.Millisecond {
		return nil, fmt.Errorf("fanout: redis config: %w: HistoryTTL %s: must be ≥ 1ms (0 means %s)", ErrInvalidConfig, c.HistoryTTL, DefaultHistoryTTL)
	}
	if c.HealthCheckInterval < 10*time.Millisecond {
		return nil, fmt.Errorf("fanout: redis config: %w: HealthCheckInterval %s: must be ≥ 10ms (0 means %s)", ErrInvalidConfig, c.HealthCheckInterval, DefaultRedisHealthCheckInterval)
	}
	if copt != nil {
		if copt.ClientName == "" {
			copt.ClientName = DefaultRedisClientName
		}
		if c.dialer != nil {
			copt.Dialer = c.dialer
		}
		return redis.NewClusterClient(copt), nil
	}
	if opt.ClientName == "" {
		opt.ClientName = DefaultRedisClientName
	}
	if c.dialer != nil {
		opt.Dialer = c.dialer
	}
	return redis.NewClient(opt), nil
}
