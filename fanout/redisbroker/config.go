package redisbroker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	// have promoted it. Every new connection to the primary asks all of
	// SentinelAddrs and goes to the primary named by those with the newest
	// configuration epoch (most of them, when they differ), not to the one
	// a sentinel behind the failover may still name: the old primary, back
	// as a primary before the sentinels make it a replica (a split brain),
	// gets no connection, and a dial is refused when no sentinel answers.
	// A new connection to a server that answers ROLE as a replica is
	// refused and retried. Default "": no Sentinel.
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
	pd := &primaryDialer{master: c.SentinelMaster, sentinels: c.SentinelAddrs,
		password: c.SentinelPassword, timeout: opt.DialTimeout, tls: opt.TLSConfig, raw: c.dialer}
	if pd.timeout <= 0 {
		pd.timeout = 5 * time.Second // go-redis's default
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
		Dialer:    pd.dial, OnConnect: primaryOnly,
	}), nil
}

// errNotPrimary starts with READONLY, the error of a write sent to a
// replica, which go-redis retries on a new connection.
const errNotPrimary = "READONLY fanout: redis: the server the sentinel named is a replica, not the primary (a failover is under way)"

// primaryDialer is the failover client's dialer. go-redis dials the
// address that one sentinel names as the primary, and keeps asking the
// same sentinel while it answers: one behind a failover (cut off from the
// others, or not yet told) names the old primary, which may be back as a
// primary (a split brain, until the sentinels make it a replica); what it
// accepts there is lost when they do. So every dial to a server other than
// a sentinel asks all the configured sentinels, and goes to the primary
// they name with the newest configuration epoch (a failover increments
// it), named by most of them; a dial is refused when no sentinel answers,
// or when as many of the newest name another address. Dials to a sentinel
// (a configured one, or one a sentinel lists) go where they were sent.
type primaryDialer struct {
	master    string
	sentinels []string
	password  string
	timeout   time.Duration
	tls       *tls.Config
	raw       func(ctx context.Context, network, addr string) (net.Conn, error) // tests' dialer, or nil
}

// sentinelView is one sentinel's answer: the primary it names, its
// configuration epoch, and the sentinels it knows.
type sentinelView struct {
	primary string
	epoch   int64
	peers   []string
}

func (d *primaryDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if slices.Contains(d.sentinels, addr) {
		return d.connect(ctx, network, addr)
	}
	views := d.ask(ctx)
	for _, v := range views {
		if slices.Contains(v.peers, addr) {
			return d.connect(ctx, network, addr) // a sentinel go-redis found
		}
	}
	primary, err := newestPrimary(views)
	if err != nil {
		return nil, fmt.Errorf("fanout: redis sentinel: dial %s: %w", addr, err)
	}
	return d.connect(ctx, network, primary)
}

// connect opens a connection to addr as go-redis would: TLS when the URL
// asks for it, keep-alives on.
func (d *primaryDialer) connect(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.raw != nil {
		return d.raw(ctx, network, addr)
	}
	nd := &net.Dialer{Timeout: d.timeout, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}}
	if d.tls == nil {
		return nd.DialContext(ctx, network, addr)
	}
	td := &tls.Dialer{NetDialer: nd, Config: d.tls}
	return td.DialContext(ctx, network, addr)
}

// sentinelAskTimeout bounds the question to each sentinel (and the dial
// to it), so that one that drops packets delays a dial that long at most.
const sentinelAskTimeout = time.Second

// ask asks every configured sentinel, at once, for its view of the
// master; the sentinels that do not answer are left out.
func (d *primaryDialer) ask(ctx context.Context) []sentinelView {
	ctx, cancel := context.WithTimeout(ctx, sentinelAskTimeout)
	defer cancel()
	views := make([]*sentinelView, len(d.sentinels))
	var wg sync.WaitGroup
	for i, addr := range d.sentinels {
		wg.Go(func() {
			c := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: d.password, MaxRetries: -1,
				DialTimeout: d.timeout, ReadTimeout: sentinelAskTimeout, WriteTimeout: sentinelAskTimeout,
				ContextTimeoutEnabled: true, PoolSize: 1, Dialer: d.connect})
			defer c.Close()
			m, err := c.Master(ctx, d.master).Result()
			if err != nil {
				return
			}
			epoch, err := strconv.ParseInt(m["config-epoch"], 10, 64)
			if err != nil || m["ip"] == "" || m["port"] == "" {
				return
			}
			v := &sentinelView{primary: net.JoinHostPort(m["ip"], m["port"]), epoch: epoch}
			peers, _ := c.Sentinels(ctx, d.master).Result()
			for _, p := range peers {
				if p["ip"] != "" && p["port"] != "" {
					v.peers = append(v.peers, net.JoinHostPort(p["ip"], p["port"]))
				}
			}
			views[i] = v
		})
	}
	wg.Wait()
	var out []sentinelView
	for _, v := range views {
		if v != nil {
			out = append(out, *v)
		}
	}
	return out
}

// newestPrimary is the primary the views name with the newest
// configuration epoch, the one most of those name.
func newestPrimary(views []sentinelView) (string, error) {
	if len(views) == 0 {
		return "", errors.New("no sentinel answered")
	}
	newest := views[0].epoch
	for _, v := range views {
		newest = max(newest, v.epoch)
	}
	votes := make(map[string]int)
	for _, v := range views {
		if v.epoch == newest {
			votes[v.primary]++
		}
	}
	var best string
	tie := false
	for addr, n := range votes {
		switch {
		case best == "" || n > votes[best]:
			best, tie = addr, false
		case n == votes[best]:
			tie = true
		}
	}
	if tie {
		return "", fmt.Errorf("the sentinels of configuration epoch %d name different primaries", newest)
	}
	return best, nil
}

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
