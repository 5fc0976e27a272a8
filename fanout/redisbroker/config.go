package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/internal/history"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Defaults of Config, exported for docs and the CLI.
const (
	DefaultKeyPrefix           = "herald:"
	DefaultClientName          = "herald"
	DefaultHealthCheckInterval = 5 * time.Second
	DefaultHeartbeatInterval   = time.Second
	DefaultWaitTimeout         = time.Second
)

// Config configures a Broker. The zero value of every field but
// URL means its documented default.
type Config struct {
	// URL of the Redis server: redis://[user:pass@]host:port/db,
	// rediss://… for TLS, or unix://…; go-redis URL options such as
	// ?dial_timeout=3s&client_name=x are accepted. The client name defaults
	// to "herald" (visible in CLIENT LIST). Required, except with
	// SentinelMaster.
	//
	// With Cluster set, the URL names one seed node of a Redis Cluster,
	// redis://[user:pass@]host:port?addr=host2:port2&…, as go-redis's
	// ParseClusterURL reads it (no database number, no unix sockets).
	//
	// With SentinelMaster set, the URL (optional) gives the primary's
	// credentials, database, TLS and options; its host and port are not
	// used: the sentinels name the primary.
	URL string

	// SentinelMaster is the master name of a Redis Sentinel deployment
	// (the name in the sentinels' "sentinel monitor NAME …"); with it the
	// broker asks SentinelAddrs for the current primary, connects to it,
	// and follows a failover (go-redis's failover client): commands and
	// the pub/sub connection go to the new primary once the sentinels
	// have promoted it. A new connection to a server that answers ROLE as
	// a replica (the old primary back, named by a sentinel still behind
	// the failover) is refused and retried. Default "": no Sentinel.
	SentinelMaster string

	// SentinelAddrs are the host:port of the sentinels, at least one;
	// required with SentinelMaster. The sentinels are reached with the
	// URL's TLS setting.
	SentinelAddrs []string

	// SentinelPassword authenticates to the sentinels (their
	// requirepass); the primary's password is the URL's. Default "": none.
	SentinelPassword string

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

	// HeartbeatInterval is how often a node (outside Cluster mode)
	// publishes a heartbeat through Redis to a pub/sub channel of its own,
	// which its pub/sub connection must receive. When none arrived for
	// 3 × HeartbeatInterval the subscription counts as broken: Ping fails
	// (the node is unready), herald_redis_pubsub_healthy is 0, and the
	// connection is replaced (then every channel resynced); the next
	// heartbeat received makes it healthy again. Default 1s.
	HeartbeatInterval time.Duration

	// WaitReplicas, when above 0 (outside Cluster mode), makes Publish
	// wait until that many replicas acknowledged the publication (WAIT,
	// sent in the same round trip) before it succeeds, so a publication a
	// publisher was told about survives the primary's failover; when fewer
	// acknowledged within WaitTimeout, Publish fails with
	// ErrNotReplicated (the publication may be in the history: a retry is
	// answered with it, see fanout.Broker.Publish). Default 0: do not wait.
	WaitReplicas int

	// WaitTimeout bounds the wait of WaitReplicas. Default 1s.
	WaitTimeout time.Duration

	// Logger receives connection and decode problems (rate-limited).
	// Default: nil, nothing is logged.
	Logger *slog.Logger

	// Registerer receives the broker's metrics:
	// herald_redis_pubsub_messages_total,
	// herald_redis_pubsub_decode_errors_total,
	// herald_redis_pubsub_reconnects_total and
	// herald_redis_pubsub_stalls_total (counters), herald_redis_up and
	// herald_redis_pubsub_healthy (gauges). Default: nil, the metrics are
	// kept but not registered.
	Registerer prometheus.Registerer

	// dialer, when set (by tests), opens every connection to Redis in
	// place of go-redis's own dialer.
	dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (c Config) withDefaults() Config {
	if c.Cluster {
		// A cluster broadcasts unsharded pub/sub to every node: sharded is
		// the only mode that scales with it.
		c.Sharded = true
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	history.Defaults(&c.HistorySize, &c.HistoryTTL)
	if c.HealthCheckInterval == 0 {
		c.HealthCheckInterval = DefaultHealthCheckInterval
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks c and returns the client for it (not connected).
func (c Config) validate() (redis.UniversalClient, error) {
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		return nil, fmt.Errorf("fanout: redis config: %w: KeyPrefix %q: must not contain '{' or '}'", fanout.ErrInvalidConfig, c.KeyPrefix)
	}
	if err := history.Check("redis config", c.HistorySize, c.HistoryTTL, fanout.ErrInvalidConfig); err != nil {
		return nil, err
	}
	if c.HealthCheckInterval < 10*time.Millisecond {
		return nil, fmt.Errorf("fanout: redis config: %w: HealthCheckInterval %s: must be ≥ 10ms (0 means %s)", fanout.ErrInvalidConfig, c.HealthCheckInterval, DefaultHealthCheckInterval)
	}
	if c.HeartbeatInterval < 10*time.Millisecond {
		return nil, fmt.Errorf("fanout: redis config: %w: HeartbeatInterval %s: must be ≥ 10ms (0 means %s)", fanout.ErrInvalidConfig, c.HeartbeatInterval, DefaultHeartbeatInterval)
	}
	if c.WaitReplicas < 0 || (c.WaitReplicas > 0 && c.Cluster) {
		return nil, fmt.Errorf("fanout: redis config: %w: WaitReplicas %d: must be ≥ 0, and 0 with Cluster", fanout.ErrInvalidConfig, c.WaitReplicas)
	}
	if c.WaitTimeout < time.Millisecond {
		return nil, fmt.Errorf("fanout: redis config: %w: WaitTimeout %s: must be ≥ 1ms (0 means %s)", fanout.ErrInvalidConfig, c.WaitTimeout, DefaultWaitTimeout)
	}
	return NewClient(c)
}

// NewClient returns a go-redis client for c's URL, Cluster or
// Sentinel deployment, as the broker makes it (not connected), for state
// other parts of a node keep in the same Redis; only URL, Cluster and the
// Sentinel fields are read. The caller closes it.
func NewClient(c Config) (redis.UniversalClient, error) {
	if c.SentinelMaster != "" {
		return c.failoverClient()
	}
	if c.URL == "" {
		return nil, fmt.Errorf("fanout: redis config: %w: URL is empty", fanout.ErrInvalidConfig)
	}
	if c.Cluster {
		copt, err := redis.ParseClusterURL(c.URL)
		if err != nil {
			return nil, urlError(err)
		}
		c.connOptions(&copt.ClientName, &copt.Dialer)
		return redis.NewClusterClient(copt), nil
	}
	opt, err := redis.ParseURL(c.URL)
	if err != nil {
		return nil, urlError(err)
	}
	c.connOptions(&opt.ClientName, &opt.Dialer)
	return redis.NewClient(opt), nil
}

// connOptions sets a client's name, when the URL gave none, and its
// dialer, when c has one.
func (c Config) connOptions(name *string, dialer *func(ctx context.Context, network, addr string) (net.Conn, error)) {
	if *name == "" {
		*name = DefaultClientName
	}
	if c.dialer != nil {
		*dialer = c.dialer
	}
}

// failoverClient returns go-redis's failover client for c's Sentinel
// deployment, with the URL's settings for the primary.
func (c Config) failoverClient() (redis.UniversalClient, error) {
	if c.Cluster {
		return nil, fmt.Errorf("fanout: redis config: %w: SentinelMaster and Cluster exclude each other", fanout.ErrInvalidConfig)
	}
	if len(c.SentinelAddrs) == 0 {
		return nil, fmt.Errorf("fanout: redis config: %w: SentinelMaster %q needs SentinelAddrs", fanout.ErrInvalidConfig, c.SentinelMaster)
	}
	for _, a := range c.SentinelAddrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("fanout: redis config: %w: SentinelAddrs %q: want host:port", fanout.ErrInvalidConfig, a)
		}
	}
	opt := &redis.Options{}
	if c.URL != "" {
		var err error
		if opt, err = redis.ParseURL(c.URL); err != nil {
			return nil, urlError(err)
		}
	}
	if opt.ClientName == "" {
		opt.ClientName = DefaultClientName
	}
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: c.SentinelMaster, SentinelAddrs: c.SentinelAddrs, SentinelPassword: c.SentinelPassword,
		ClientName: opt.ClientName, Protocol: opt.Protocol,
		Username: opt.Username, Password: opt.Password, DB: opt.DB,
		MaxRetries: opt.MaxRetries, MinRetryBackoff: opt.MinRetryBackoff, MaxRetryBackoff: opt.MaxRetryBackoff,
		DialTimeout: opt.DialTimeout, ReadTimeout: opt.ReadTimeout, WriteTimeout: opt.WriteTimeout,
		PoolSize: opt.PoolSize, PoolTimeout: opt.PoolTimeout, MinIdleConns: opt.MinIdleConns, MaxIdleConns: opt.MaxIdleConns,
		ConnMaxIdleTime: opt.ConnMaxIdleTime, ConnMaxLifetime: opt.ConnMaxLifetime,
		TLSConfig: opt.TLSConfig,
		Dialer:    c.dialer, OnConnect: primaryOnly,
	}), nil
}

// errNotPrimary starts with READONLY, the error of a write sent to a
// replica, which go-redis retries on a new connection.
const errNotPrimary = "READONLY fanout: redis: the server the sentinel named is a replica, not the primary (a failover is under way)"

// primaryOnly is the OnConnect of the failover client: it refuses a new
// connection to a replica. The sentinel asked for the primary's address
// may still name the old primary for a moment after a failover, and a
// dial that began before go-redis heard of the failover may end after it
// dropped the connections to the old address. When the
// old primary is back, as a replica, such a connection would stay in the
// pool: its script cache is empty (EVALSHA answers NOSCRIPT however often
// the script is loaded through other connections) and a PUBLISH sent
// there reaches only that replica's subscribers. Refused, the command is
// retried on a new connection, dialed to the address the sentinels name
// then.
func primaryOnly(ctx context.Context, cn *redis.Conn) error {
	role, err := cn.Do(ctx, "ROLE").Slice()
	if err != nil {
		return err
	}
	// go-redis also runs it on its connections to the sentinels (ROLE
	// "sentinel"): only a replica is refused.
	if len(role) > 0 && role[0] == "slave" {
		return errors.New(errNotPrimary)
	}
	return nil
}

// urlError is the config error for a URL go-redis cannot read. A
// *url.Error quotes the whole URL, password included: keep only its
// reason.
func urlError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("fanout: redis config: %w: URL: %v", fanout.ErrInvalidConfig, err)
}
