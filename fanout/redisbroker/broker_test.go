package redisbroker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

func newTestRedisBroker(t *testing.T, cfg Config) *Broker {
	t.Helper()
	b, err := New(cfg)
	return fanouttest.Stopped(t, b, err)
}

// subscribedBefore subscribes a resync-aware subscriber on node to
// channel acme/ch and waits until it has received "before", published by
// publisher.
func subscribedBefore(t *testing.T, node redisNode, publisher *Broker, ch string) (fanout.Key, fanouttest.ResyncSub, fanout.Publication) {
	t.Helper()
	key := fanout.Key{Tenant: "acme", Channel: ch}
	sub := fanouttest.ResyncSub{Sub: fanouttest.NewSub(100)}
	if err := node.hub.Subscribe(fanouttest.Context(t), key, sub); err != nil {
		t.Fatal(err)
	}
	first := fanouttest.MustPublish(t, publisher, fanouttest.Msg(key, "before"))
	sub.Receive(t, 1)
	return key, sub, first
}

// redisNode is one gateway node: a Broker started with a fanout.Hub.
type redisNode struct {
	broker *Broker
	hub    *fanout.Hub
}

func newRedisNode(t *testing.T, cfg Config) redisNode {
	t.Helper()
	b := newTestRedisBroker(t, cfg)
	return redisNode{broker: b, hub: fanouttest.StartHub(t, b, fanout.HubConfig{})}
}

// rawRedis is a plain client for poking at the broker's keys.
func rawRedis(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRedisBrokerRecover(t *testing.T) {
	t.Parallel()
	fanouttest.RunRecover(t, func(t *testing.T) fanout.Broker {
		url, prefix := testenv.Redis(t)
		return newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix, HistorySize: 3})
	})
}

func TestRedisBrokerFence(t *testing.T) {
	t.Parallel()
	fanouttest.RunFence(t, func(t *testing.T, historySize int) fanout.Broker {
		url, prefix := testenv.Redis(t)
		return newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix, HistorySize: historySize})
	})
}

// TestRedisFenceIsPerChannel: Redis keeps the newest fence value per
// channel and scope, in the meta hash, and keeps it when only the stream
// was lost.
func TestRedisFenceIsPerChannel(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	raw := rawRedis(t, url)
	b := newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix})
	a, c := fanout.Key{Tenant: "acme", Channel: "a"}, fanout.Key{Tenant: "acme", Channel: "c"}
	fanouttest.MustPublish(t, b, fanouttest.Fenced(a, "m1", fanout.Fence{Scope: "p1", Value: 2}))
	fanouttest.MustPublish(t, b, fanouttest.Fenced(c, "m1", fanout.Fence{Scope: "p1", Value: 1}))
	if v := raw.HGet(fanouttest.Context(t), prefix+"{acme/a}:meta", "f:p1").Val(); v != "2" {
		t.Fatalf("f:p1 = %q, want 2", v)
	}
	if err := raw.Del(fanouttest.Context(t), prefix+"{acme/a}:stream").Err(); err != nil {
		t.Fatal(err)
	}
	fanouttest.MustBeStale(t, b, fanouttest.Fenced(a, "m2", fanout.Fence{Scope: "p1", Value: 1}))
	if p := fanouttest.MustPublish(t, b, fanouttest.Fenced(a, "m2", fanout.Fence{Scope: "p1", Value: 2})); p.Offset != 1 {
		t.Fatalf("publication after the stream was lost at %v, want offset 1", p.Position)
	}
}

// TestRedisStreamEntriesWithoutID: entries written before fencing (field e
// alone) still recover, and a takeover finds their id by the envelope.
func TestRedisStreamEntriesWithoutID(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	raw := rawRedis(t, url)
	ctx := fanouttest.Context(t)
	b := newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix})
	key := fanout.Key{Tenant: "acme", Channel: "legacy"}
	stream := prefix + "{acme/legacy}:stream"
	var old []fanout.Publication
	for _, id := range []string{"m1", "m10", "m2"} {
		old = append(old, fanouttest.MustPublish(t, b, fanouttest.Msg(key, id)))
	}
	entries, err := raw.XRange(ctx, stream, "-", "+").Result()
	if err != nil || len(entries) != 3 || entries[0].Values["i"] != "m1" {
		t.Fatalf("stream entries %+v, err %v; want 3 with field i", entries, err)
	}
	pipe := raw.TxPipeline()
	pipe.Del(ctx, stream)
	for _, e := range entries {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: e.ID, Values: []any{"e", e.Values["e"]}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	r := fanouttest.MustRecover(t, b, key, fanout.Position{Epoch: old[0].Epoch})
	if !r.Recovered || !slices.Equal(fanouttest.IDs(r.Publications), []string{"m1", "m10", "m2"}) {
		t.Fatalf("recover of entries without field i: %+v", r)
	}
	for _, want := range old {
		if got := fanouttest.MustPublish(t, b, fanouttest.Fenced(key, want.ID, fanout.Fence{Scope: "p1", Value: 1, Takeover: true})); got.Position != want.Position {
			t.Fatalf("takeover of legacy %s at %v, want %v", want.ID, got.Position, want.Position)
		}
	}
	if p := fanouttest.MustPublish(t, b, fanouttest.Fenced(key, "m", fanout.Fence{Scope: "p1", Value: 1, Takeover: true})); p.Offset != 4 {
		t.Fatalf("takeover of a new id at %v, want offset 4", p.Position)
	}
}

func TestRedisConfig(t *testing.T) {
	t.Parallel()
	got := Config{URL: "redis://x"}.withDefaults()
	if got.KeyPrefix != "herald:" || got.HistorySize != 1000 || got.HistoryTTL != 24*time.Hour ||
		got.HealthCheckInterval != 5*time.Second || got.Sharded {
		t.Fatalf("defaults: %+v", got)
	}
	for _, cfg := range []Config{
		{},
		{URL: "http://host"},
		{URL: "redis://localhost", KeyPrefix: "a{b}:"},
		{URL: "redis://localhost", HistorySize: -1},
		{URL: "redis://localhost", HistoryTTL: -time.Second},
		{URL: "redis://localhost", HealthCheckInterval: time.Millisecond},
	} {
		if _, err := New(cfg); !errors.Is(err, fanout.ErrInvalidConfig) {
			t.Errorf("%+v: err = %v, want fanout.ErrInvalidConfig", cfg, err)
		}
	}
	_, err := New(Config{URL: "redis://user:s3cret@host:port/0"})
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("bad URL error must not quote the password: %v", err)
	}
}

// testTwoNodes: node A publishes, node B's subscriber receives in order the
// very bytes A encoded, and B can recover what A published.
func testTwoNodes(t *testing.T, sharded bool) {
	url, prefix := testenv.Redis(t)
	// Pinged whenever silent for 400ms: often during the test, yet a
	// reader that the scheduler leaves waiting past a short interval on a
	// loaded machine (a pong already in the socket but read after its
	// deadline) does not count as a dead connection here.
	cfg := Config{URL: url, KeyPrefix: prefix, Sharded: sharded, HealthCheckInterval: 400 * time.Millisecond}
	a, b := newRedisNode(t, cfg), newRedisNode(t, cfg)
	key := fanout.Key{Tenant: "acme", Channel: "orders/1"}
	sub := fanouttest.NewSub(1000)
	if err := b.hub.Subscribe(fanouttest.Context(t), key, sub); err != nil {
		t.Fatal(err)
	}
	const n = 100
	sent := make([]fanout.Publication, n)
	for i := range n {
		m := fanouttest.Msg(key, fmt.Sprintf("m%d", i))
		m.Data = json.RawMessage(fmt.Sprintf(`{"n": %d, "text": "line\nbreak \u2028"}`, i))
		sent[i] = fanouttest.MustPublish(t, a.broker, m)
	}
	got := sub.Receive(t, n)
	for i, p := range got {
		if p.Position() != sent[i].Position || p.Key() != key {
			t.Fatalf("delivery %d at %v %v, sent at %v", i, p.Key(), p.Position(), sent[i].Position)
		}
		if want := fanout.NewPrepared(sent[i]).JSON(); string(p.JSON()) != string(want) {
			t.Fatalf("delivery %d envelope\n got %s\nwant %s", i, p.JSON(), want)
		}
	}
	r := fanouttest.MustRecover(t, b.broker, key, fanout.Position{Offset: 0, Epoch: sent[0].Epoch})
	if !r.Recovered || len(r.Publications) != n {
		t.Fatalf("node B recover: recovered %v, %d publications", r.Recovered, len(r.Publications))
	}
	for i, p := range r.Publications {
		if p.ID != sent[i].ID || p.Position != sent[i].Position || p.Key != key || !p.Time.Equal(sent[i].Time) ||
			string(p.Data) != string(sent[i].Data) || string(fanout.NewPrepared(p).JSON()) != string(fanout.NewPrepared(sent[i]).JSON()) {
			t.Fatalf("recovered %d: %+v, sent %+v", i, p, sent[i])
		}
	}
	// After unsubscribing, B hears nothing more of the channel.
	if err := b.hub.Unsubscribe(fanouttest.Context(t), key, sub); err != nil {
		t.Fatal(err)
	}
	fanouttest.MustPublish(t, a.broker, fanouttest.Msg(key, "late"))
	marker := fanouttest.NewSub(1)
	if err := b.hub.Subscribe(fanouttest.Context(t), fanout.Key{Tenant: "acme", Channel: "marker"}, marker); err != nil {
		t.Fatal(err)
	}
	fanouttest.MustPublish(t, a.broker, fanouttest.Msg(fanout.Key{Tenant: "acme", Channel: "marker"}, "marker"))
	marker.Receive(t, 1) // pub/sub is ordered: "late" would have come first
	if len(sub.Drain()) != 0 {
		t.Fatal("unsubscribed node still received publications")
	}
	for _, node := range []redisNode{a, b} {
		if v := testutil.ToFloat64(node.broker.m.reconnects); v != 0 {
			t.Fatalf("reconnects = %v on a healthy connection pinged when silent", v)
		}
	}
}

// TestRedisTwoNodes runs testTwoNodes over one pub/sub connection and
// over sharded pub/sub.
func TestRedisTwoNodes(t *testing.T) {
	t.Parallel()
	for name, sharded := range map[string]bool{"plain": false, "sharded": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testTwoNodes(t, sharded)
		})
	}
}

// pubsubClientID finds the id of the pub/sub connection named name.
func pubsubClientID(t *testing.T, c *redis.Client, name string) string {
	t.Helper()
	list, err := c.ClientList(fanouttest.Context(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(list, "\n") {
		if !strings.Contains(line, " name="+name+" ") || !strings.Contains(line, "flags=P") {
			continue
		}
		for field := range strings.SplitSeq(line, " ") {
			if id, ok := strings.CutPrefix(field, "id="); ok {
				return id
			}
		}
	}
	t.Fatalf("no pub/sub client named %s in CLIENT LIST", name)
	return ""
}

func TestRedisResyncAfterClientKill(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	name := "herald-test-" + testenv.Suffix()
	node := newRedisNode(t, Config{URL: url + "?client_name=" + name, KeyPrefix: prefix})
	publisher := newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix})
	key, sub, first := subscribedBefore(t, node, publisher, "kill")

	raw := rawRedis(t, url)
	id := pubsubClientID(t, raw, name)
	// Only this test's connection: other tests share the server.
	if n, err := raw.Do(fanouttest.Context(t), "CLIENT", "KILL", "ID", id, "TYPE", "pubsub").Int(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL: %d, %v", n, err)
	}
	if k := sub.WaitResync(t, "no resync after the pub/sub connection was killed"); k != key {
		t.Fatalf("resync for %v", k)
	}
	if v := testutil.ToFloat64(node.broker.m.reconnects); v != 1 {
		t.Fatalf("herald_redis_pubsub_reconnects_total = %v, want 1", v)
	}
	// The subscription is live again, and recovery fills any gap.
	nextDelivered(t, publisher, sub.Sub, key, "after reconnect")
	r := fanouttest.MustRecover(t, node.broker, key, first.Position)
	if !r.Recovered || !fanouttest.EqualOffsets(fanouttest.Offsets(r.Publications), 2) {
		t.Fatalf("recover after resync: %+v", r)
	}
}

// freezingProxy forwards TCP to Redis until frozen: then the connections
// open at that moment stop carrying bytes without closing (a half-open
// link), while new connections work.
type freezingProxy struct {
	ln     net.Listener
	target string
	frozen chan struct{} // closed by freeze
	conns  chan net.Conn
}

// proxiedRedis is the test Redis (its URL and a key prefix of the
// test's own) and its URL through a freezingProxy.
func proxiedRedis(t *testing.T) (url, prefix, proxied string, proxy *freezingProxy) {
	url, prefix = testenv.Redis(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy = newFreezingProxy(t, opt.Addr)
	return url, prefix, strings.Replace(url, opt.Addr, proxy.ln.Addr().String(), 1), proxy
}

func newFreezingProxy(t *testing.T, target string) *freezingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezingProxy{ln: ln, target: target, frozen: make(chan struct{}), conns: make(chan net.Conn, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.serve(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(p.conns)
		for c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *freezingProxy) serve(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.conns <- c
	p.conns <- up
	select {
	case <-p.frozen:
		// Opened after the freeze: forward normally.
		go pipe(up, c, nil)
		go pipe(c, up, nil)
	default:
		go pipe(up, c, p.frozen)
		go pipe(c, up, p.frozen)
	}
}

// pipe copies src to dst; once frozen is closed it keeps reading but
// forwards nothing.
func pipe(dst, src net.Conn, frozen chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			_ = dst.Close()
			return
		}
		if frozen != nil {
			select {
			case <-frozen:
				continue
			default:
			}
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			_ = src.Close()
			return
		}
	}
}

// TestRedisSilentConnectionReplaced: a pub/sub connection that stops
// answering (no RST, no FIN) is pinged, then replaced, and its channels
// resynced.
func TestRedisSilentConnectionReplaced(t *testing.T) {
	t.Parallel()
	url, prefix, proxied, proxy := proxiedRedis(t)
	node := newRedisNode(t, Config{URL: proxied, KeyPrefix: prefix, HealthCheckInterval: 100 * time.Millisecond})
	publisher := newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix})
	key, sub, _ := subscribedBefore(t, node, publisher, "silent")

	close(proxy.frozen)
	sub.WaitResync(t, "silent connection was not replaced")
	// "before" may not come again; the next delivery is the new one.
	nextDelivered(t, publisher, sub.Sub, key, "after replacement")
}

func TestRedisEpochChangesWhenHistoryLost(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	raw := rawRedis(t, url)

	t.Run("stream deleted", func(t *testing.T) {
		b := newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix})
		key := fanout.Key{Tenant: "acme", Channel: "lost"}
		var last fanout.Publication
		for i := range 3 {
			last = fanouttest.MustPublish(t, b, fanouttest.Msg(key, fmt.Sprint(i)))
		}
		if err := raw.Del(fanouttest.Context(t), prefix+"{acme/lost}:stream").Err(); err != nil {
			t.Fatal(err)
		}
		r := fanouttest.MustRecover(t, b, key, fanout.Position{Offset: 1, Epoch: last.Epoch})
		if r.Recovered || r.Top.Epoch == last.Epoch || r.Top.Offset != 0 {
			t.Fatalf("recover after the stream was lost: %+v", r)
		}
		p := fanouttest.MustPublish(t, b, fanouttest.Msg(key, "new"))
		if p.Offset != 1 || p.Epoch != r.Top.Epoch {
			t.Fatalf("publication after loss at %v, want 1 in %s", p.Position, r.Top.Epoch)
		}
		// The ids of the lost history went with it.
		if p := fanouttest.MustPublish(t, b, fanouttest.Msg(key, "0")); p.Offset != 2 {
			t.Fatalf("an id of the lost history published at %v, want offset 2", p.Position)
		}
	})

	t.Run("both keys deleted", func(t *testing.T) {
		b := newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix})
		key := fanout.Key{Tenant: "acme", Channel: "flushed"}
		old := fanouttest.MustPublish(t, b, fanouttest.Msg(key, "1"))
		if err := raw.Del(fanouttest.Context(t), prefix+"{acme/flushed}:stream", prefix+"{acme/flushed}:meta").Err(); err != nil {
			t.Fatal(err)
		}
		p := fanouttest.MustPublish(t, b, fanouttest.Msg(key, "2"))
		if p.Offset != 1 || p.Epoch == old.Epoch {
			t.Fatalf("publication after flush at %v (old %v)", p.Position, old.Position)
		}
		if r := fanouttest.MustRecover(t, b, key, old.Position); r.Recovered || r.Top != p.Position {
			t.Fatalf("recover from the old epoch: %+v", r)
		}
	})

	t.Run("TTL expiry", func(t *testing.T) {
		// Long enough that the keys are still there when PTTL reads them on a
		// busy machine; the test then waits for them to expire.
		const historyTTL = 2 * time.Second
		b := newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix, HistoryTTL: historyTTL})
		key := fanout.Key{Tenant: "acme", Channel: "ttl"}
		old := fanouttest.MustPublish(t, b, fanouttest.Msg(key, "1"))
		for _, k := range []string{prefix + "{acme/ttl}:stream", prefix + "{acme/ttl}:meta"} {
			if ttl := raw.PTTL(fanouttest.Context(t), k).Val(); ttl <= 0 || ttl > historyTTL {
				t.Fatalf("PTTL %s = %v, want (0, %v]", k, ttl, historyTTL)
			}
		}
		ctx := fanouttest.Context(t)
		for raw.Exists(ctx, prefix+"{acme/ttl}:meta").Val() != 0 {
			select {
			case <-ctx.Done():
				t.Fatal("keys did not expire")
			case <-time.After(20 * time.Millisecond):
			}
		}
		r := fanouttest.MustRecover(t, b, key, old.Position)
		if r.Recovered || r.Top.Epoch == old.Epoch {
			t.Fatalf("recover after expiry: %+v", r)
		}
	})
}

func TestRedisHistoryTrimmedExactly(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	b := newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix, HistorySize: 5})
	key := fanout.Key{Tenant: "acme", Channel: "trim"}
	for i := range 200 {
		fanouttest.MustPublish(t, b, fanouttest.Msg(key, fmt.Sprint(i)))
	}
	if n := rawRedis(t, url).XLen(fanouttest.Context(t), prefix+"{acme/trim}:stream").Val(); n != 5 {
		t.Fatalf("XLEN = %d, want 5", n)
	}
}

func TestRedisPingFailsOnClosedPort(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	b := newTestRedisBroker(t, Config{URL: "redis://" + addr + "/0?dial_timeout=1s&max_retries=-1"})
	if err := b.Ping(fanouttest.Context(t)); err == nil {
		t.Fatal("ping of a closed port succeeded")
	}
	// Subscribe waits for the connection until its context ends, then
	// leaves nothing behind.
	if err := b.Start(context.Background(), fanouttest.NewRecorder()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := b.Subscribe(ctx, fanout.Key{Tenant: "acme", Channel: "x"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("subscribe without Redis: %v", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.topics) != 0 {
		t.Fatalf("topics left after a failed subscribe: %v", b.topics)
	}
}

func TestRedisLifecycle(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	b := newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix})
	key := fanout.Key{Tenant: "acme", Channel: "life"}
	if err := b.Subscribe(fanouttest.Context(t), key); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("subscribe before start: %v", err)
	}
	if p := fanouttest.MustPublish(t, b, fanouttest.Msg(key, "early")); p.Offset != 1 {
		t.Fatalf("publish before start: %v", p.Position)
	}
	if err := b.Ping(fanouttest.Context(t)); err != nil {
		t.Fatal(err)
	}
	rec := fanouttest.NewRecorder() // a plain fanout.Handler, not a fanout.PreparedHandler
	if err := b.Start(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background(), fanouttest.NewRecorder()); !errors.Is(err, fanout.ErrAlreadyStarted) {
		t.Fatalf("second start: %v", err)
	}
	if err := b.Subscribe(fanouttest.Context(t), key); err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe(fanouttest.Context(t), key); err != nil { // already subscribed
		t.Fatal(err)
	}
	live := fanouttest.MustPublish(t, b, fanouttest.Msg(key, "live"))
	got := rec.WaitFor(t, "the live publication", func(p []fanout.Publication) bool { return len(p) == 1 })
	if got[0].Key != key || got[0].Position != live.Position || got[0].ID != "live" {
		t.Fatalf("handler got %+v, want %+v", got[0], live)
	}
	b.Stop()
	b.Stop()
	if _, err := b.Publish(fanouttest.Context(t), fanouttest.Msg(key, "late")); !errors.Is(err, fanout.ErrStopped) {
		t.Fatalf("publish after stop: %v", err)
	}
	if err := b.Subscribe(fanouttest.Context(t), key); !errors.Is(err, fanout.ErrStopped) {
		t.Fatalf("subscribe after stop: %v", err)
	}
	if err := b.Ping(fanouttest.Context(t)); !errors.Is(err, fanout.ErrStopped) {
		t.Fatalf("ping after stop: %v", err)
	}

	never := newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix})
	never.Stop()
	if err := never.Start(context.Background(), fanouttest.NewRecorder()); !errors.Is(err, fanout.ErrStopped) {
		t.Fatalf("start after stop: %v", err)
	}
}

// TestRedisDecodeErrorsCounted: foreign or forged messages on a channel's
// topic are dropped and counted; the channel keeps working.
func TestRedisDecodeErrorsCounted(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	node := newRedisNode(t, Config{URL: url, KeyPrefix: prefix})
	key := fanout.Key{Tenant: "acme", Channel: "noise"}
	sub := fanouttest.NewSub(10)
	if err := node.hub.Subscribe(fanouttest.Context(t), key, sub); err != nil {
		t.Fatal(err)
	}
	raw := rawRedis(t, url)
	topic := prefix + "{acme/noise}:pub"
	forged := "other\n" + string(fanout.NewPrepared(fanout.Publication{
		Message:  fanouttest.Msg(fanout.Key{Tenant: "other", Channel: "noise"}, "forged"),
		Position: fanout.Position{Offset: 1, Epoch: "e"},
	}).JSON())
	for _, payload := range []string{"no newline", "acme\n{not json", forged} {
		if err := raw.Publish(fanouttest.Context(t), topic, payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
	good := fanouttest.MustPublish(t, node.broker, fanouttest.Msg(key, "good"))
	if got := sub.Receive(t, 1); got[0].Position() != good.Position {
		t.Fatalf("got %v, want %v", got[0].Position(), good.Position)
	}
	if v := testutil.ToFloat64(node.broker.m.decodeErrors); v != 3 {
		t.Fatalf("herald_redis_pubsub_decode_errors_total = %v, want 3", v)
	}
	if v := testutil.ToFloat64(node.broker.m.messages); v != 4 {
		t.Fatalf("herald_redis_pubsub_messages_total = %v, want 4", v)
	}
}

// eventLog is a slog.Handler that sends the message of every record to
// events (dropping when full) after calling onRecord, if set.
type eventLog struct {
	events   chan string
	onRecord func(msg string)
}

func (h eventLog) Enabled(context.Context, slog.Level) bool { return true }
func (h eventLog) Handle(_ context.Context, r slog.Record) error {
	if h.onRecord != nil {
		h.onRecord(r.Message)
	}
	select {
	case h.events <- r.Message:
	default:
	}
	return nil
}
func (h eventLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h eventLog) WithGroup(string) slog.Handler      { return h }

// waitLog waits for a log message containing part.
func waitLog(t *testing.T, events <-chan string, part string) {
	t.Helper()
	for {
		select {
		case m := <-events:
			if strings.Contains(m, part) {
				return
			}
		case <-fanouttest.Context(t).Done():
			t.Fatalf("no log %q", part)
		}
	}
}

// TestRedisHeartbeatNoticesStalledSubscription: a pub/sub connection that
// stops carrying bytes, while new connections work, receives no
// heartbeat; after 3 heartbeat intervals (the ping of a silent connection
// set far later) the node is unready (Ping fails,
// herald_redis_pubsub_healthy 0), replaces the connection, resyncs its
// channels, and is healthy again once a heartbeat arrives.
func TestRedisHeartbeatNoticesStalledSubscription(t *testing.T) {
	t.Parallel()
	url, prefix, proxied, proxy := proxiedRedis(t)
	var node atomic.Pointer[Broker]
	stalled := make(chan error, 1) // Ping and the gauge when the stall is logged
	logs := eventLog{events: make(chan string, 16), onRecord: func(msg string) {
		if b := node.Load(); b != nil && strings.Contains(msg, "no heartbeat") {
			err := b.Ping(context.Background())
			if g := testutil.ToFloat64(b.m.healthy); err == nil || g != 0 {
				err = fmt.Errorf("stalled, but Ping = %v and herald_redis_pubsub_healthy = %v", err, g)
			} else {
				err = nil
			}
			stalled <- err
		}
	}}
	// 3 intervals without a heartbeat processed is a stall: short enough
	// for a quick test, long enough that a loaded machine starving the
	// node's goroutines does not make one before the freeze.
	const every = 200 * time.Millisecond
	// Commands may wait a minute for an answer: a heartbeat published on a
	// command connection frozen with the rest must not.
	n := newRedisNode(t, Config{URL: proxied + "?read_timeout=1m", KeyPrefix: prefix, HeartbeatInterval: every,
		HealthCheckInterval: time.Minute, Logger: slog.New(logs)})
	node.Store(n.broker)
	publisher := newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix})
	key, sub, _ := subscribedBefore(t, n, publisher, "heartbeat")
	if err := n.broker.Ping(fanouttest.Context(t)); err != nil {
		t.Fatal(err)
	}

	frozen := time.Now()
	close(proxy.frozen)
	select {
	case err := <-stalled:
		if err != nil {
			t.Fatal(err)
		}
	case <-fanouttest.Context(t).Done():
		t.Fatal("the stalled subscription was not noticed")
	}
	noticed := time.Since(frozen)
	sub.WaitResync(t, "the channel was not resynced")
	// Later replacements (a heartbeat late on a loaded machine) resync
	// again: take their notices, which must not block the broker.
	drained := make(chan struct{})
	defer func() { <-drained }()
	stopDrain := make(chan struct{})
	defer close(stopDrain)
	go func() {
		defer close(drained)
		for {
			select {
			case <-sub.Resyncs:
			case <-stopDrain:
				return
			}
		}
	}()
	waitLog(t, logs.events, "heartbeats again")
	if err := n.broker.Ping(fanouttest.Context(t)); err != nil {
		t.Fatalf("after a heartbeat arrived: %v", err)
	}
	if g := testutil.ToFloat64(n.broker.m.healthy); g != 1 {
		t.Fatalf("herald_redis_pubsub_healthy = %v after a heartbeat arrived", g)
	}
	if s := testutil.ToFloat64(n.broker.m.stalls); s != 1 {
		t.Fatalf("herald_redis_pubsub_stalls_total = %v, want 1", s)
	}
	nextDelivered(t, publisher, sub.Sub, key, "after the replacement")
	t.Logf("stall noticed %v after the connection froze (heartbeat every %v)", noticed.Round(time.Millisecond), every)
}

// nextDelivered publishes "after" on key and fails t unless it is the
// next publication sub receives; what names the moment.
func nextDelivered(t *testing.T, publisher fanout.Broker, sub *fanouttest.Sub, key fanout.Key, what string) {
	t.Helper()
	after := fanouttest.MustPublish(t, publisher, fanouttest.Msg(key, "after"))
	if got := sub.Receive(t, 1); got[0].Position() != after.Position {
		t.Fatalf("%s got %v, want %v", what, got[0].Position(), after.Position)
	}
}

// TestRedisHeartbeatOfReplacedConnectionIgnored: a heartbeat read from a
// connection after it was replaced (the heartbeat loop publishes beside
// the replacement, and the old connection stays open until the new one
// has sent its SUBSCRIBE) says nothing of the new connection, whose
// subscription may not be confirmed yet: the node stays unready until a
// heartbeat arrives on the new one, and a publication made once it is
// ready reaches the subscriber.
func TestRedisHeartbeatOfReplacedConnectionIgnored(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	logs := eventLog{events: make(chan string, 16)}
	// The heartbeat loop and the silence check stay out of the way: the
	// test plays the heartbeats.
	node := newRedisNode(t, Config{URL: url, KeyPrefix: prefix, HeartbeatInterval: time.Hour,
		HealthCheckInterval: time.Hour, Logger: slog.New(logs)})
	b := node.broker
	publisher := newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix})
	key, sub, _ := subscribedBefore(t, node, publisher, "replaced")
	ctx := fanouttest.Context(t)

	// What the heartbeat loop does after 3 silent intervals.
	b.stalled.Store(true)
	b.mu.Lock()
	sh, runCtx := b.shards[""], b.runCtx
	b.mu.Unlock()
	old := sh.live.Load()
	b.replaceShard(runCtx, sh)
	b.handle(runCtx, sh, old, &redis.Message{Channel: b.hbTopic})
	if g := testutil.ToFloat64(b.m.healthy); g != 0 {
		t.Fatalf("herald_redis_pubsub_healthy = %v after a heartbeat of the replaced connection", g)
	}
	if k := sub.WaitResync(t, "no resync after the replacement"); k != key {
		t.Fatalf("resync for %v", k)
	}
	if err := rawRedis(t, url).Publish(ctx, b.hbTopic, "").Err(); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs.events, "heartbeats again")
	if err := b.Ping(ctx); err != nil {
		t.Fatalf("after a heartbeat on the new connection: %v", err)
	}
	nextDelivered(t, publisher, sub.Sub, key, "after the replacement")
}

// TestRedisRecoverAfterRefusedDials: while Redis cannot be reached, the
// command client's pool stops dialing after as many failed dials as its
// size, and answers with its last dial error until a probe (once a
// second) gets through, while the pub/sub connection dials at once. When
// Redis is back the subscription may be confirmed, and its channels
// resynced, before the command client works again: a Recover sent as soon
// as the resync is told still succeeds. While Redis stays unreachable,
// Recover fails within its bound.
func TestRedisRecoverAfterRefusedDials(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	name := "herald-test-" + testenv.Suffix()
	var refuse atomic.Bool
	cfg := Config{URL: url + "?client_name=" + name, KeyPrefix: prefix, HeartbeatInterval: time.Hour,
		dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if refuse.Load() {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
	node := newRedisNode(t, cfg)
	publisher := newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix})
	key, sub, first := subscribedBefore(t, node, publisher, "dialstop")
	ctx := fanouttest.Context(t)
	raw := rawRedis(t, url)
	id := pubsubClientID(t, raw, name)

	refuse.Store(true)
	// More failed commands than the pool has connections: it stops dialing.
	var fails sync.WaitGroup
	for range 2 * node.broker.client.(*redis.Client).Options().PoolSize {
		fails.Go(func() { _ = node.broker.client.Ping(ctx).Err() })
	}
	fails.Wait()
	if err := raw.Do(ctx, "CLIENT", "KILL", "ID", id, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	lost := fanouttest.MustPublish(t, publisher, fanouttest.Msg(key, "lost"))
	start := time.Now()
	if _, err := node.broker.Recover(ctx, key, first.Position, 0); err == nil {
		t.Fatal("recover succeeded while every dial is refused")
	} else if d := time.Since(start); d < recoverRetryFor {
		t.Fatalf("recover gave up after %v, want ≥ %v: %v", d, recoverRetryFor, err)
	}

	refuse.Store(false)
	if k := sub.WaitResync(t, "no resync after the pub/sub connection came back"); k != key {
		t.Fatalf("resync for %v", k)
	}
	r, err := node.broker.Recover(ctx, key, first.Position, 0)
	if err != nil {
		t.Fatalf("recover when told to resync: %v", err)
	}
	if !r.Recovered || len(r.Publications) != 1 || r.Publications[0].ID != lost.ID {
		t.Fatalf("recover when told to resync: %+v", r)
	}
}
