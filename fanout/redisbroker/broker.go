package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/internal/errwrap"
	"github.com/heraldgw/herald/internal/lifecycle"
	"github.com/heraldgw/herald/internal/promreg"
	"github.com/heraldgw/herald/internal/ratelog"
	"github.com/heraldgw/herald/internal/wait"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Broker is the broker of a multi-node deployment: every channel's
// stream lives in Redis, and every publication reaches the nodes
// subscribed to its channel through Redis pub/sub.
//
// Publish runs one Lua script that assigns the offset, appends to the
// stream and publishes, so the history and the fan-out cannot diverge; it
// also checks a fenced publication (see fanout.Fence) against the newest fence
// value kept in the channel's meta hash, per scope.
// Subscribe and Unsubscribe add and remove a node's channels on its pub/sub
// connections: one connection to a single server (or a proxy), or with
// Cluster one SSUBSCRIBE connection per primary that owns the slot of a
// subscribed channel (see redisShard). When a connection is lost, or a
// channel's slot moves to another primary, publications sent meanwhile are
// missed by this node (not by the history): once the channel is subscribed
// again the broker calls the handler's HandleResync (see fanout.Resyncer) for it.
type Broker struct {
	cfg     Config
	client  redis.UniversalClient
	cluster *redis.ClusterClient // client in Cluster mode, else nil
	log     *slog.Logger
	logs    *ratelog.Logger

	pubCmd      string        // PUBLISH or SPUBLISH
	topicPrefix string        // KeyPrefix + "{"
	hbTopic     string        // this node's heartbeat channel: KeyPrefix + "heartbeat:" + random
	done        chan struct{} // closed by Stop

	lastBeat atomic.Int64 // unix ns of the last heartbeat received (or of the last replacement)
	stalled  atomic.Bool  // no heartbeat for 3 × HeartbeatInterval, until the next one

	// mu guards the pub/sub state below, and every redisShard's fields.
	mu        sync.Mutex
	runCtx    context.Context // set by Start; ends on Stop
	cancelRun context.CancelFunc
	shards    map[string]*redisShard // by primary address; "" outside Cluster mode
	topics    map[string]*topicState
	loops     sync.WaitGroup // the shards' receive loops

	handler   fanout.Handler
	prepared  fanout.PreparedHandler // handler as fanout.PreparedHandler, or nil
	resyncer  fanout.Resyncer        // handler as fanout.Resyncer, or nil
	svc       lifecycle.Service
	closeOnce sync.Once
	closed    atomic.Bool

	m redisMetrics
}

// topicState is one subscribed pub/sub channel.
type topicState struct {
	key       fanout.Key
	shard     *redisShard   // the connection it is subscribed on
	ready     chan struct{} // closed when Redis confirmed the subscription
	confirmed bool
	resync    bool // moved to another shard: resync once confirmed there
}

var _ fanout.Broker = (*Broker)(nil)

// New returns a broker on the Redis at cfg.URL. It does not
// connect: Ping does, and so do Publish, Recover and Start.
func New(cfg Config) (*Broker, error) {
	cfg = cfg.withDefaults()
	client, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	b := &Broker{
		cfg:         cfg,
		log:         cfg.Logger,
		logs:        ratelog.New(cfg.Logger, 10*time.Second, 1),
		pubCmd:      "PUBLISH",
		topicPrefix: cfg.KeyPrefix + "{",
		hbTopic:     cfg.KeyPrefix + "heartbeat:" + fanout.NewEpoch(),
		done:        make(chan struct{}),
		client:      client,
		shards:      make(map[string]*redisShard),
		topics:      make(map[string]*topicState),
	}
	b.m = newRedisMetrics(b.up, b.healthy)
	if cfg.Sharded {
		b.pubCmd = "SPUBLISH"
	}
	b.cluster, _ = client.(*redis.ClusterClient)
	if cfg.Registerer != nil {
		if err := b.m.register(cfg.Registerer); err != nil {
			_ = client.Close()
			return nil, fmt.Errorf("fanout: new redis broker: register metrics: %w", err)
		}
	}
	return b, nil
}

// Publish appends msg to its channel's stream and publishes it, atomically.
// A msg whose ID is still in the stream is answered with that publication
// instead, appending and publishing nothing; a fenced msg may be refused
// (fanout.ErrStaleFence) first (see fanout.Fence; here the newest fence value is kept
// per channel and scope).
func (b *Broker) Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error) {
	if b.closed.Load() {
		return fanout.Publication{}, errwrap.Wrap("publish", fanout.ErrStopped)
	}
	pub, err := fanout.NewPublication(msg, time.Now())
	if err != nil {
		return fanout.Publication{}, err
	}
	f := msg.Fence
	takeover := "0"
	if f.Takeover {
		takeover = "1"
	}
	head, tail := fanout.EnvelopeParts(&pub)
	name := b.name(pub.Key)
	keys := []string{name + ":meta", name + ":stream", name + ":ids"}
	args := []any{fanout.NewEpoch(), head, tail, b.cfg.HistorySize, b.cfg.HistoryTTL.Milliseconds(),
		b.topic(pub.Key), pub.Key.Tenant, b.pubCmd,
		f.Scope, strconv.FormatInt(f.Value, 10), takeover, pub.ID}
	var res []any
	if b.cfg.WaitReplicas > 0 {
		res, err = b.publishReplicated(ctx, keys, args)
	} else {
		res, err = publishScript.Run(ctx, b.client, keys, args...).Slice()
	}
	if err != nil {
		return fanout.Publication{}, fmt.Errorf("fanout: publish %s: %w", pub.Key, err)
	}
	if len(res) != 2 {
		return fanout.Publication{}, fmt.Errorf("fanout: publish %s: unexpected script reply %v", pub.Key, res)
	}
	switch tag, _ := res[0].(string); tag {
	case "stale":
		return fanout.Publication{}, fmt.Errorf("fanout: publish %s: %w (scope %q: fence %d, newest %v)", pub.Key, fanout.ErrStaleFence, f.Scope, f.Value, res[1])
	case "dup":
		env, _ := res[1].(string)
		old, err := fanout.DecodeEnvelope([]byte(env))
		if err != nil {
			return fanout.Publication{}, fmt.Errorf("fanout: publish %s: retained publication: %w", pub.Key, err)
		}
		old.Key = pub.Key
		return old, nil
	}
	offset, ok1 := res[0].(int64)
	epoch, ok2 := res[1].(string)
	if !ok1 || !ok2 || offset < 1 {
		return fanout.Publication{}, fmt.Errorf("fanout: publish %s: unexpected script reply %v", pub.Key, res)
	}
	pub.Position = fanout.Position{Offset: uint64(offset), Epoch: epoch}
	return pub, nil
}

// publishReplicated runs the publish script and WAIT for WaitReplicas
// replicas on one connection, in one round trip (WAIT counts the replicas
// that have this connection's writes). A script the connection's server
// has not loaded is sent again with EVAL, on the same connection, which
// loads it there.
func (b *Broker) publishReplicated(ctx context.Context, keys []string, args []any) ([]any, error) {
	var script, wait *redis.Cmd
	run := func(eval func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd) error {
		_, err := b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			script = eval(ctx, p, keys, args...)
			wait = p.Do(ctx, "wait", b.cfg.WaitReplicas, b.cfg.WaitTimeout.Milliseconds())
			return nil
		})
		return err
	}
	err := run(publishScript.EvalSha)
	if err != nil && redis.HasErrorPrefix(script.Err(), "NOSCRIPT") {
		err = run(publishScript.Eval)
	}
	if err != nil {
		return nil, err
	}
	res, err := script.Slice()
	if err != nil {
		return nil, err
	}
	if n, _ := wait.Int64(); n < int64(b.cfg.WaitReplicas) {
		return nil, fmt.Errorf("%w: %d of %d replicas within %s", ErrNotReplicated, n, b.cfg.WaitReplicas, b.cfg.WaitTimeout)
	}
	return res, nil
}

// Recover returns the publications of key after since, when the stream
// still holds all of them and the epoch matches.
func (b *Broker) Recover(ctx context.Context, key fanout.Key, since fanout.Position, limit int) (fanout.Recovery, error) {
	if b.closed.Load() {
		return fanout.Recovery{}, errwrap.Wrap("recover", fanout.ErrStopped)
	}
	if err := fanout.ValidateKey(key); err != nil {
		return fanout.Recovery{}, fmt.Errorf("fanout: recover: %w", err)
	}
	name := b.name(key)
	count := b.cfg.HistorySize
	if limit > 0 && limit < count {
		count = limit
	}
	keys := []string{name + ":meta", name + ":stream", name + ":ids"}
	args := []any{fanout.NewEpoch(), b.cfg.HistoryTTL.Milliseconds(), since.Epoch, strconv.FormatUint(since.Offset, 10), count}
	res, err := recoverScript.Run(ctx, b.client, keys, args...).Slice()
	// Redis back (a failover, a restart): go-redis answers with its last
	// dial error, without dialing, for up to a second after as many failed
	// dials as its pool size, while this node's subscription is back and
	// its connections resync. The script only reads (or sets an epoch
	// once), so it is sent again until it gets through, within a bound.
	giveUp := time.Now().Add(recoverRetryFor)
	for n := 2; err != nil && transient(err) && time.Now().Before(giveUp) && !b.closed.Load(); n++ {
		if !wait.Sleep(ctx, min(backoff(n), recoverRetryPause)) {
			break
		}
		res, err = recoverScript.Run(ctx, b.client, keys, args...).Slice()
	}
	if err != nil {
		return fanout.Recovery{}, fmt.Errorf("fanout: recover %s: %w", key, err)
	}
	if len(res) != 3 {
		return fanout.Recovery{}, fmt.Errorf("fanout: recover %s: unexpected script reply", key)
	}
	epoch, ok1 := res[0].(string)
	top, ok2 := res[1].(int64)
	entries, ok3 := res[2].([]any)
	if !ok1 || !ok2 || !ok3 || top < 0 {
		return fanout.Recovery{}, fmt.Errorf("fanout: recover %s: unexpected script reply", key)
	}
	r := fanout.Recovery{Top: fanout.Position{Offset: uint64(top), Epoch: epoch}}
	if since.Epoch != epoch || since.Offset > r.Top.Offset {
		return r, nil
	}
	missing := r.Top.Offset - since.Offset
	if limit > 0 && uint64(limit) < missing {
		missing = uint64(limit) // a page: the first limit of them
	}
	if uint64(len(entries)) != missing {
		// Trimmed (or the stream holds more than our HistorySize): the
		// first publication after since is gone.
		return r, nil
	}
	pubs := make([]fanout.Publication, 0, len(entries))
	for i, e := range entries {
		p, err := decodeStreamEntry(e)
		if err != nil {
			return fanout.Recovery{}, fmt.Errorf("fanout: recover %s: %w", key, err)
		}
		if p.Offset != since.Offset+uint64(i)+1 || p.Epoch != epoch {
			return r, nil
		}
		p.Key = key
		pubs = append(pubs, p)
	}
	r.Publications = pubs
	r.Recovered = true
	return r, nil
}

// recoverRetryFor bounds how long Recover sends its script again after
// transient failures (see transient), and recoverRetryPause the pause
// between two tries: go-redis's pool, after failed dials, tries a dial
// again once a second.
const (
	recoverRetryFor   = 2 * time.Second
	recoverRetryPause = 250 * time.Millisecond
)

// transient reports whether err is a failure to reach the primary rather
// than an answer from Redis: a dial refused (or the pool's remembered
// dial error), a connection lost, or a server that cannot serve yet
// (LOADING, MASTERDOWN, READONLY from a replica during a failover). Not
// the caller's context ending, nor a closed client.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	for _, prefix := range []string{"LOADING", "MASTERDOWN", "READONLY", "TRYAGAIN"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// decodeStreamEntry decodes one XRANGE entry: [id, [field, value, …]],
// from field e (other fields, such as i, are ignored).
func decodeStreamEntry(e any) (fanout.Publication, error) {
	pair, ok := e.([]any)
	if !ok || len(pair) != 2 {
		return fanout.Publication{}, fmt.Errorf("%w: stream entry is not [id, fields]", fanout.ErrInvalidEnvelope)
	}
	fields, ok := pair[1].([]any)
	if !ok {
		return fanout.Publication{}, fmt.Errorf("%w: stream entry fields", fanout.ErrInvalidEnvelope)
	}
	for i := 0; i+1 < len(fields); i += 2 {
		if f, _ := fields[i].(string); f == "e" {
			v, _ := fields[i+1].(string)
			return fanout.DecodeEnvelope([]byte(v))
		}
	}
	return fanout.Publication{}, fmt.Errorf("%w: stream entry has no envelope", fanout.ErrInvalidEnvelope)
}

// Ping sends PING, and fails while the pub/sub subscription is stalled
// (no heartbeat received, see Config.HeartbeatInterval).
func (b *Broker) Ping(ctx context.Context) error {
	if b.stalled.Load() && !b.closed.Load() {
		return fmt.Errorf("fanout: redis pub/sub: no heartbeat received for %s; resubscribing", 3*b.cfg.HeartbeatInterval)
	}
	return b.ping(ctx)
}

// ping sends PING.
func (b *Broker) ping(ctx context.Context) error {
	if b.closed.Load() {
		return errwrap.Wrap("redis ping", fanout.ErrStopped)
	}
	if err := b.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("fanout: redis ping: %w", err)
	}
	return nil
}

// Stop closes the pub/sub connections, waits for their receive loops and
// closes the client. Safe to call twice and before Start; every later call
// fails with fanout.ErrStopped.
func (b *Broker) Stop() {
	b.svc.Stop(func() {
		close(b.done)
		b.mu.Lock()
		if b.cancelRun != nil {
			b.cancelRun()
		}
		for _, sh := range b.shards {
			b.closeShardLocked(sh)
		}
		b.mu.Unlock()
		b.loops.Wait()
	})
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		_ = b.client.Close()
	})
}

// name is the common start of key's Redis names: prefix{tenant/channel}.
func (b *Broker) name(k fanout.Key) string {
	return b.topicPrefix + k.Tenant + "/" + k.Channel + "}"
}

// topic is key's pub/sub channel name.
func (b *Broker) topic(k fanout.Key) string { return b.name(k) + ":pub" }

// keyOfTopic parses a pub/sub channel name back into its key; ok is false
// for a name this broker did not make.
func (b *Broker) keyOfTopic(topic string) (fanout.Key, bool) {
	rest, ok := strings.CutPrefix(topic, b.topicPrefix)
	if !ok {
		return fanout.Key{}, false
	}
	rest, ok = strings.CutSuffix(rest, "}:pub")
	if !ok {
		return fanout.Key{}, false
	}
	tenant, channel, ok := strings.Cut(rest, "/")
	return fanout.Key{Tenant: tenant, Channel: channel}, ok
}

// redisMetrics are the Broker's Prometheus metrics.
type redisMetrics struct {
	messages     prometheus.Counter
	decodeErrors prometheus.Counter
	reconnects   prometheus.Counter
	stalls       prometheus.Counter
	up           prometheus.GaugeFunc
	healthy      prometheus.GaugeFunc
}

// upPingTimeout bounds the PING behind herald_redis_up, which runs while
// Prometheus scrapes.
const upPingTimeout = time.Second

// up is the value of herald_redis_up: 1 when Redis answers a PING within
// upPingTimeout, else 0 (also once the broker is stopped).
func (b *Broker) up() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), upPingTimeout)
	defer cancel()
	if b.ping(ctx) != nil {
		return 0
	}
	return 1
}

// healthy is the value of herald_redis_pubsub_healthy.
func (b *Broker) healthy() float64 {
	if b.stalled.Load() {
		return 0
	}
	return 1
}

func newRedisMetrics(up, healthy func() float64) redisMetrics {
	return redisMetrics{
		healthy: promreg.GaugeFunc("herald_redis_pubsub_healthy",
			"0 while this node's pub/sub subscription is stalled (no heartbeat of its own received for 3 heartbeat intervals; /readyz fails meanwhile), else 1.", healthy),
		stalls: promreg.Counter("herald_redis_pubsub_stalls_total",
			"Times this node's pub/sub subscription was found stalled by its heartbeat (each followed by a new connection and a resync of its channels)."),
		up: promreg.GaugeFunc("herald_redis_up",
			"1 when Redis answered a PING from this node's broker client during this scrape (bounded by 1s), else 0.", up),
		messages: promreg.Counter("herald_redis_pubsub_messages_total",
			"Publications received on this node's Redis pub/sub connections."),
		decodeErrors: promreg.Counter("herald_redis_pubsub_decode_errors_total",
			"Pub/sub messages dropped because they could not be decoded."),
		reconnects: promreg.Counter("herald_redis_pubsub_reconnects_total",
			"Times one of this node's Redis pub/sub connections was lost (each followed by a resync of its channels)."),
	}
}

func (m redisMetrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.messages, m.decodeErrors, m.reconnects, m.stalls, m.up, m.healthy} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
