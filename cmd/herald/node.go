package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/heraldgw/herald/outboxfeed/outboxdb"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/redisbroker"
	"github.com/heraldgw/herald/outboxfeed"
)

// brokerSettings select and tune the broker.
type brokerSettings struct {
	RedisURL       string
	RedisPrefix    string
	RedisSharded   bool
	RedisCluster   bool
	SentinelMaster string
	SentinelAddrs  []string
	SentinelPass   string
	Heartbeat      time.Duration
	WaitReplicas   int
	WaitTimeout    time.Duration
	HistorySize    int
	HistoryTTL     time.Duration
	MaxChannels    int
	HistoryLog     bool // serve only: keep the in-memory broker's history in <data-dir>/history
}

func (b *brokerSettings) register(st *settings) {
	b.registerRedis(st)
	st.Int(&b.HistorySize, "history-size", fanout.DefaultHistorySize, "publications kept per channel for resume")
	st.Duration(&b.HistoryTTL, "history-ttl", fanout.DefaultHistoryTTL, "how long an idle channel keeps its history and epoch")
	st.Int(&b.MaxChannels, "max-channels", fanout.DefaultMaxChannels, "channels with history kept by the in-memory broker")
	st.Duration(&b.Heartbeat, "redis-heartbeat-interval", redisbroker.DefaultHeartbeatInterval, "Redis (not Cluster): how often a node publishes a heartbeat its own pub/sub connection must receive; none for 3 intervals makes the node unready and resubscribes it")
	st.Int(&b.WaitReplicas, "redis-wait-replicas", 0, "Redis (not Cluster): replicas that must acknowledge a publication (WAIT) before the publish succeeds, so it survives a failover; 0 = do not wait")
	st.Duration(&b.WaitTimeout, "redis-wait-timeout", redisbroker.DefaultWaitTimeout, "how long a publish waits for --redis-wait-replicas; fewer acknowledgements fail it (retried later, without a second history entry)")
}

// usesRedis says whether Redis (a server, a Cluster or a Sentinel
// deployment) is configured.
func (b *brokerSettings) usesRedis() bool { return b.RedisURL != "" || b.SentinelMaster != "" }

// redisConfig is the Redis broker's configuration.
func (b *brokerSettings) redisConfig() redisbroker.Config {
	return redisbroker.Config{
		URL: b.RedisURL, KeyPrefix: b.RedisPrefix, HistorySize: b.HistorySize, HistoryTTL: b.HistoryTTL,
		Sharded: b.RedisSharded, Cluster: b.RedisCluster,
		SentinelMaster: b.SentinelMaster, SentinelAddrs: b.SentinelAddrs, SentinelPassword: b.SentinelPass,
		HeartbeatInterval: b.Heartbeat, WaitReplicas: b.WaitReplicas, WaitTimeout: b.WaitTimeout,
	}
}

// registerHistoryLog registers the in-memory broker's history log (serve
// only: a feed process's in-memory broker serves no client).
func (b *brokerSettings) registerHistoryLog(st *settings) {
	st.Bool(&b.HistoryLog, "history-log", true, "in-memory broker, Linux: keep every channel's epoch, offsets and history in <data-dir>/history, so clients resume across a restart, a SIGTERM or a killed process alike; after a machine crash every channel starts over (docs/delivery.md); false = history lives in memory only")
}

// historyDir is where serve keeps the in-memory broker's history log;
// empty when there is none.
func (b *brokerSettings) historyDir(s storeSettings) string {
	if b.usesRedis() || !b.HistoryLog || !fanout.HistoryLogSupported {
		return ""
	}
	return filepath.Join(s.DataDir, "history")
}

// registerRedis registers only the Redis connection settings.
func (b *brokerSettings) registerRedis(st *settings) {
	st.String(&b.RedisURL, "redis-url", "", "redis://… (rediss:// for TLS, unix:// for a socket) selects the Redis broker (many nodes); anything else is refused; empty = in-memory broker (one node)")
	st.String(&b.RedisPrefix, "redis-key-prefix", redisbroker.DefaultKeyPrefix, "prefix of every Redis key and pub/sub channel Herald uses")
	st.Bool(&b.RedisSharded, "redis-sharded", false, "use sharded pub/sub (SPUBLISH/SSUBSCRIBE, Redis ≥ 7); all nodes must agree")
	st.Bool(&b.RedisCluster, "redis-cluster", false, "--redis-url names a seed node of a Redis Cluster (more seeds as ?addr=host:port), for the broker, tickets and revocations; implies --redis-sharded, one pub/sub connection per primary")
	st.String(&b.SentinelMaster, "redis-sentinel-master", "", "master name of a Redis Sentinel deployment: selects the Redis broker on the primary the sentinels name, followed through failovers; --redis-url (optional) then gives only credentials, database and options")
	st.StringList(&b.SentinelAddrs, "redis-sentinel-addrs", "host:port of the sentinels (repeat, or comma-separated); required with --redis-sentinel-master")
	st.String(&b.SentinelPass, "redis-sentinel-password", "", "password of the sentinels (their requirepass); empty = none. The primary's password goes in --redis-url")
	st.checks = append(st.checks, func() error { return b.checkRedisURL(st.source("redis-url")) })
}

// checkRedisURL refuses a --redis-url the Redis client cannot read, at
// start-up and naming the forms it takes, rather than at the first
// connection.
func (b *brokerSettings) checkRedisURL(from origin) error {
	if b.SentinelMaster != "" || len(b.SentinelAddrs) > 0 {
		if b.SentinelMaster == "" || len(b.SentinelAddrs) == 0 || b.RedisCluster {
			return fmt.Errorf("config: --redis-sentinel-master and --redis-sentinel-addrs go together, without --redis-cluster")
		}
		c := b.redisConfig()
		c.URL = "" // checked below
		rdb, err := redisbroker.NewClient(c)
		if err != nil {
			return fmt.Errorf("config: --redis-sentinel-addrs: %w", err)
		}
		_ = rdb.Close()
	}
	if b.RedisURL == "" {
		return nil
	}
	where := from.named("--redis-url")
	var err error
	forms := "redis://HOST:6379/0, rediss://… (TLS) or unix:///path/to/redis.sock"
	if b.RedisCluster {
		_, err = redis.ParseClusterURL(b.RedisURL)
		forms = "redis://HOST:6379 or rediss://… (TLS), more seeds as ?addr=HOST:PORT"
	} else {
		_, err = redis.ParseURL(b.RedisURL)
	}
	if err != nil {
		return fmt.Errorf("config: %s %q is not a Redis URL (%v): give %s; leave it empty for the in-memory broker (one node)",
			where, redactURL(b.RedisURL), err, forms)
	}
	return nil
}

func (b *brokerSettings) open(log *slog.Logger, reg prometheus.Registerer, historyDir string) (fanout.Broker, string, error) {
	if !b.usesRedis() {
		m, err := fanout.NewMemoryBroker(fanout.MemoryConfig{
			HistorySize: b.HistorySize, HistoryTTL: b.HistoryTTL, MaxChannels: b.MaxChannels,
			HistoryDir: historyDir, Logger: log,
		})
		if errors.Is(err, fanout.ErrInvalidConfig) {
			return nil, "", fmt.Errorf("config: --history-size/--history-ttl/--max-channels: %w", err)
		}
		if err != nil {
			return nil, "", fmt.Errorf("history log %s (turn it off with --history-log=false): %w", historyDir, err)
		}
		return m, "in-memory", nil
	}
	cfg := b.redisConfig()
	cfg.Logger, cfg.Registerer = log, reg
	r, err := redisbroker.New(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("config: --redis-*: %w", err)
	}
	if b.SentinelMaster != "" {
		return r, "redis (sentinel " + b.SentinelMaster + ")", nil
	}
	return r, "redis", nil
}

// workerSettings tune the outbox Worker.
type workerSettings struct {
	Types          string
	BatchSize      int
	Concurrency    int
	PollInterval   time.Duration
	Lease          time.Duration
	MaxAttempts    int
	MaxAge         time.Duration
	NotifyTrigger  bool
	Retention      time.Duration
	SegmentRecords int
	Lanes          int
	ActivePoll     time.Duration
	CycleInterval  time.Duration
	IdleAfter      time.Duration
	DurableClaims  bool
	RangeRecords   int
	ArchiveWait    time.Duration
	Handlers       handlersValue
	// StoreProbeMax and BrokerProbeMax bound the pings of a store or a
	// broker that does not answer (outboxfeed.WorkerConfig).
	StoreProbeMax  time.Duration
	BrokerProbeMax time.Duration
}

func (w *workerSettings) register(st *settings) {
	w.Handlers.register(st)
	st.String(&w.Types, "types", "", "type catalogue JSON file (docs/events.md): the (type, schema_version) pairs read, with their kind, direction, trust, handlers and payload schema; empty = every type accepted at any schema_version ≥ 1")
	st.Int(&w.BatchSize, "outbox-batch-size", outboxfeed.DefaultBatchSize, "the realtime handler's batch: records one claim of a partition takes (1–10000; a webhook handler's is its batch_size, docs/handlers.md)")
	st.Int(&w.RangeRecords, "outbox-range-records", outboxfeed.DefaultRangeRecords, "PostgreSQL: records of one range a lane reads and holds in memory to publish it in staging order; a larger range is read in runs")
	st.Int(&w.Concurrency, "outbox-concurrency", 32, "channels published in parallel within a batch")
	st.Duration(&w.PollInterval, "outbox-poll-interval", 500*time.Millisecond, "how often the Worker polls when no wake-up arrives")
	st.Duration(&w.Lease, "outbox-lease", 30*time.Second, "lease on a claimed partition's batch, renewed every third of it while the batch's deliveries run; once it expires (its Worker died or stalled), another Worker takes the batch over")
	st.Int(&w.MaxAttempts, "outbox-max-attempts", 10, "failed attempts before a record is dead-lettered")
	st.Duration(&w.MaxAge, "outbox-max-age", 24*time.Hour, "age after which a failing record is dead-lettered")
	st.Int(&w.Lanes, "outbox-lanes", 4, "loops that claim, publish and complete for a Worker: below a backlog the first holds up to this many partitions in one store step, with a backlog each lane holds one")
	st.Duration(&w.ActivePoll, "outbox-active-poll-interval", 500*time.Microsecond, "how soon a busy Worker claims again (it stands in for wake-ups while records flow)")
	st.Duration(&w.CycleInterval, "outbox-cycle-interval", outboxfeed.DefaultCycleInterval, "while records trickle in (a claim found fewer than a backlog), the shortest time from one claim of the Worker's first lane to its next: the records committed meanwhile are claimed together, which costs PostgreSQL less per record, at up to this much latency; a backlog is claimed at once; 0 = none (at most --outbox-idle-after)")
	st.Duration(&w.IdleAfter, "outbox-idle-after", 50*time.Millisecond, "time without records after which a Worker arms the NOTIFY wake-up and waits (a Worker that polled arms it sooner, once three claims in a row found nothing)")
	st.Duration(&w.StoreProbeMax, "outbox-store-probe-max-interval", 5*time.Second, "longest wait between two pings of an outbox store that does not answer (the first after 250ms, doubling); meanwhile the Worker claims nothing and reads no backlog gauge, and it resumes within this long of the store answering")
	st.Duration(&w.BrokerProbeMax, "outbox-broker-probe-max-interval", time.Second, "longest wait between two pings of a broker that does not take publishes; the Worker claims and writes nothing meanwhile and resumes within about this long of the broker answering")
	st.Bool(&w.DurableClaims, "outbox-durable-claims", false, "commit the Worker's claim/complete transactions synchronously (off: a completion lost in a crash only causes a duplicate)")
	st.Duration(&w.Retention, "outbox-retention", outboxfeed.DefaultRetention, "dispatched records are kept at least this long; then whole segments go (PostgreSQL), or rows (SQLite)")
	st.Int(&w.SegmentRecords, "outbox-segment-records", outboxfeed.DefaultSegmentRecords, "PostgreSQL: records per segment of herald.outbox (retention drops whole segments)")
	st.Duration(&w.ArchiveWait, "outbox-archive-lock-timeout", time.Second, "PostgreSQL: the longest a done segment's move out of herald.outbox waits for the table's lock (producers queue behind it that long); the wait starts at 20ms and doubles after each run that could not get it")
}

// startPruner runs the retention pruner beside the Worker.
func (w *workerSettings) startPruner(ctx context.Context, store outboxfeed.Store, log *slog.Logger, reg prometheus.Registerer) (*outboxfeed.Pruner, error) {
	p, err := outboxfeed.NewPruner(store, outboxfeed.PrunerConfig{Retention: w.Retention, SegmentRecords: int64(w.SegmentRecords),
		ArchiveLockTimeout: w.ArchiveWait, Logger: log, Registerer: reg})
	if err != nil {
		return nil, fmt.Errorf("config: --outbox-retention: %w", err)
	}
	if err := p.Start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (w *workerSettings) registerTrigger(st *settings) {
	st.Bool(&w.NotifyTrigger, "outbox-notify", true, "PostgreSQL: install the NOTIFY trigger that wakes the Worker (off = polling only)")
}

func (w *workerSettings) config(log *slog.Logger, reg prometheus.Registerer) (outboxfeed.WorkerConfig, error) {
	// A lane holds a range's records to hand them out a batch at a time.
	if w.RangeRecords > 0 && w.BatchSize > w.RangeRecords {
		return outboxfeed.WorkerConfig{}, fmt.Errorf("config: --outbox-batch-size %d: must be at most --outbox-range-records (%d)", w.BatchSize, w.RangeRecords)
	}
	for _, e := range w.Handlers.entries {
		if b := e.Webhook.WithDefaults().BatchSize; w.RangeRecords > 0 && b > w.RangeRecords {
			return outboxfeed.WorkerConfig{}, fmt.Errorf("config: handler %s: batch_size %d: must be at most --outbox-range-records (%d)", e.Name, b, w.RangeRecords)
		}
	}
	var registry *outboxfeed.Registry
	if w.Types != "" {
		r, err := outboxfeed.LoadRegistry(w.Types)
		if err != nil {
			return outboxfeed.WorkerConfig{}, fmt.Errorf("config: --types: %w", err)
		}
		// The handlers the catalogue names are configured ones.
		names := []string{outboxfeed.RealtimeHandler}
		for _, e := range w.Handlers.entries {
			names = append(names, e.Name)
		}
		if err := r.CheckHandlers(names); err != nil {
			return outboxfeed.WorkerConfig{}, fmt.Errorf("config: --types: %w", err)
		}
		registry = r
	}
	cycle := w.CycleInterval
	if cycle == 0 {
		cycle = -1 // none (outboxfeed.WorkerConfig's zero is its default)
	}
	return outboxfeed.WorkerConfig{
		CycleInterval: cycle, BatchSize: w.BatchSize, RangeRecords: w.RangeRecords, Concurrency: w.Concurrency, PollInterval: w.PollInterval,
		LeaseDuration: w.Lease, MaxAttempts: w.MaxAttempts, MaxAge: w.MaxAge,
		Lanes: w.Lanes, ActivePollInterval: w.ActivePoll, IdleAfter: w.IdleAfter, DurableClaims: w.DurableClaims,
		ProbeMaxInterval: w.StoreProbeMax, BrokerProbeMaxInterval: w.BrokerProbeMax,
		Registry: registry, Logger: log, Registerer: reg,
	}, nil
}

// newRegistry is the Prometheus registry of one process.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// openStore opens and migrates the outbox store.
func openStore(ctx context.Context, s storeSettings, notifyTrigger bool, log *slog.Logger) (outboxfeed.Store, error) {
	st, err := outboxdb.Open(ctx, outboxdb.Config{
		DatabaseURL: s.url(), DisableNotifyTrigger: !notifyTrigger, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := st.Migrate(mctx); err != nil {
		return nil, errors.Join(err, st.Close())
	}
	return st, nil
}
