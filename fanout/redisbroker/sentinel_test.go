package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// follower is a client of one channel on one node: it takes publications
// in offset order, and on a gap or a resync resumes from the history
// (queued for a resumer), as the gateway's connections do.
type follower struct {
	key    fanout.Key
	broker fanout.Broker
	queue  chan<- *follower
	seen   func(id string) // called for every publication taken
	failed *atomic.Int64   // resumes the broker did not answer

	mu       sync.Mutex
	epoch    string
	next     uint64 // the offset it takes next
	ids      []string
	queued   bool
	lost     int           // resumes answered recovered: false
	progress chan struct{} // poked whenever next grows
}

func (f *follower) Deliver(p *fanout.Prepared) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch pos := p.Position(); {
	case pos.Epoch == f.epoch && pos.Offset < f.next: // had it
	case pos.Epoch == f.epoch && pos.Offset == f.next:
		f.takeLocked(p.Publication())
	default:
		f.enqueueLocked()
	}
}

func (f *follower) Resync(fanout.Key) {
	f.mu.Lock()
	f.enqueueLocked()
	f.mu.Unlock()
}

func (f *follower) takeLocked(p fanout.Publication) {
	f.ids = append(f.ids, p.ID)
	f.next++
	f.seen(p.ID)
	select {
	case f.progress <- struct{}{}:
	default:
	}
}

// enqueueLocked queues f for a resume, once: the queue holds every
// follower, so this never blocks.
func (f *follower) enqueueLocked() {
	if !f.queued {
		f.queued = true
		f.queue <- f
	}
}

// resume recovers what f missed; false when the broker did not answer.
func (f *follower) resume(ctx context.Context) bool {
	f.mu.Lock()
	f.queued = false
	since := fanout.Position{Offset: f.next - 1, Epoch: f.epoch}
	f.mu.Unlock()
	r, err := f.broker.Recover(ctx, f.key, since, 0)
	if err != nil {
		f.failed.Add(1)
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !r.Recovered {
		f.lost++
		return true
	}
	for _, p := range r.Publications {
		if p.Offset == f.next {
			f.takeLocked(p)
		}
	}
	return true
}

// upTo waits until f took every offset up to top.
func (f *follower) upTo(ctx context.Context, top uint64) error {
	for {
		f.mu.Lock()
		done := f.next > top
		f.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-f.progress:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestRedisSentinelFailover: a primary, its replica and three sentinels;
// two nodes with 1,000 followers on 10 channels; a publisher that waits
// for the replica (WaitReplicas 1) and retries until accepted. The
// primary is killed (SIGKILL) while records flow. The sentinels promote
// the replica, the nodes notice (heartbeat: stalled, then healthy),
// resubscribe, and every follower resumes from the history: each holds
// every accepted record once, in offset order, no resume was told
// recovered: false, and none failed (a resume follows a delivery or a
// resync, so the new primary serves the node's subscription by then). The killed server is started again (empty) as the
// new primary's replica, so WAIT is answered again.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	s := testenv.StartRedisSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, prefix := testenv.Redis(t) // a prefix of the test's own
	cfg := Config{
		SentinelMaster: testenv.SentinelMaster, SentinelAddrs: s.Sentinels, KeyPrefix: prefix,
		HeartbeatInterval: 100 * time.Millisecond,
	}
	const channels, perNode, records, killAfter = 10, 50, 1000, 300
	var keys []fanout.Key
	for c := range channels {
		keys = append(keys, fanout.Key{Tenant: "acme", Channel: fmt.Sprintf("failover/%d", c)})
	}
	pcfg := cfg
	pcfg.WaitReplicas, pcfg.WaitTimeout = 1, 200*time.Millisecond
	publisher := newTestRedisBroker(t, pcfg)
	seed := make(map[fanout.Key]fanout.Publication)
	for _, k := range keys {
		seed[k] = fanouttest.MustPublish(t, publisher, fanouttest.Msg(k, "seed"))
	}

	var (
		killAt    time.Time
		afterKill atomic.Pointer[string] // the first id published after the kill
		resumedAt atomic.Int64           // unix ns of the first take of a record published after the kill
		failed    atomic.Int64
	)
	seen := func(id string) {
		if first := afterKill.Load(); first != nil && id >= *first && resumedAt.Load() == 0 {
			resumedAt.CompareAndSwap(0, time.Now().UnixNano())
		}
	}
	// The queue is never closed: the nodes' brokers may still hand a
	// follower a resync after the resumers stopped; it holds every
	// follower, so such a late enqueue never blocks.
	queue := make(chan *follower, 2*channels*perNode)
	stop := make(chan struct{})
	var resumers sync.WaitGroup
	for range 8 {
		resumers.Go(func() {
			for {
				var f *follower
				select {
				case <-stop:
					return
				case f = <-queue:
				}
				if !f.resume(ctx) {
					time.Sleep(20 * time.Millisecond) // the broker is not back yet
					f.mu.Lock()
					f.enqueueLocked()
					f.mu.Unlock()
				}
			}
		})
	}
	var nodes []redisNode
	var followers []*follower
	for range 2 {
		n := newRedisNode(t, cfg)
		nodes = append(nodes, n)
		for i := range perNode * channels {
			k := keys[i%channels]
			f := &follower{key: k, broker: n.broker, queue: queue, seen: seen, failed: &failed,
				epoch: seed[k].Epoch, next: seed[k].Offset + 1, progress: make(chan struct{}, 1)}
			if err := n.hub.Subscribe(ctx, k, f); err != nil {
				t.Fatal(err)
			}
			followers = append(followers, f)
		}
	}

	accepted := make(map[string]fanout.Publication)
	var acceptedAfterKill time.Time
	for i := range records {
		id := fmt.Sprintf("r%05d", i)
		m := fanouttest.Msg(keys[i%channels], id)
		for {
			p, err := publisher.Publish(ctx, m)
			if err == nil {
				accepted[id] = p
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("publish %s: %v", id, err)
			}
			if errors.Is(err, ErrNotReplicated) && acceptedAfterKill.IsZero() {
				restartAsReplica(t, s, ctx)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if i > killAfter && acceptedAfterKill.IsZero() {
			acceptedAfterKill = time.Now()
		}
		if i == killAfter {
			next := fmt.Sprintf("r%05d", i+1)
			afterKill.Store(&next)
			killAt = time.Now()
			s.Kill(s.Primary)
		}
	}

	for _, f := range followers {
		top := accepted[fmt.Sprintf("r%05d", records-channels+slices.Index(keys, f.key))].Offset
		if err := f.upTo(ctx, top); err != nil {
			f.mu.Lock()
			t.Fatalf("follower of %v on %d of %d: %v", f.key, f.next-1, top, err)
		}
	}
	close(stop)
	resumers.Wait()

	for _, k := range keys {
		h := fanouttest.History(t, publisher, k)
		if h[0].Epoch != seed[k].Epoch {
			t.Fatalf("%v: epoch %s after the failover, was %s", k, h[0].Epoch, seed[k].Epoch)
		}
		for _, p := range h[1:] {
			if a, ok := accepted[p.ID]; !ok || a.Position != p.Position {
				t.Fatalf("%v: history has %s at %v, accepted at %v", k, p.ID, p.Position, a.Position)
			}
		}
		want := fanouttest.IDs(h[1:])
		for _, f := range followers {
			if f.key != k {
				continue
			}
			if f.lost > 0 || !slices.Equal(f.ids, want) {
				t.Fatalf("%v: a follower took %d records (%d resumes not recovered), the history has %d", k, len(f.ids), f.lost, len(want))
			}
		}
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d resumes failed", n)
	}
	if n := len(accepted); n != records {
		t.Fatalf("%d records accepted, want %d", n, records)
	}
	for i, n := range nodes {
		if stalls := testutil.ToFloat64(n.broker.m.stalls); stalls < 1 {
			t.Errorf("node %d: herald_redis_pubsub_stalls_total = %v, want ≥ 1", i, stalls)
		}
		if err := n.broker.Ping(ctx); err != nil {
			t.Errorf("node %d after the failover: %v", i, err)
		}
	}
	t.Logf("kill → first record published after it delivered: %v; → first publish acknowledged by the new replica: %v",
		time.Duration(resumedAt.Load()-killAt.UnixNano()).Round(time.Millisecond), acceptedAfterKill.Sub(killAt).Round(time.Millisecond))
}

// restartAsReplica starts the killed primary again as a replica of the
// new one, once the sentinels name another primary.
func restartAsReplica(t *testing.T, s *testenv.RedisSentinel, ctx context.Context) {
	t.Helper()
	if s.Running(s.Primary) {
		return
	}
	if now, err := s.PrimaryNow(ctx); err == nil && now != s.Primary {
		s.RestartAsReplica(s.Primary, now)
	}
}

// TestRedisSentinelStaleAddressIsRefused: just after a failover, the
// sentinel a dial asks may still name the old primary, back by then as a
// replica (empty, so its script cache too). Here the dialer sends one
// connection there while the others reach the primary: the publish
// script's pipeline gets it, and the script is loaded through another
// connection. The broker must not keep that connection: Publish (WAIT
// for the replica) succeeds, its record is in the primary's history, and
// later publications succeed too.
func TestRedisSentinelStaleAddressIsRefused(t *testing.T) {
	t.Parallel()
	s := testenv.StartRedisSentinel(t)
	ctx := fanouttest.Context(t)
	_, prefix := testenv.Redis(t)
	var stale, redirected atomic.Int32 // dials still to send to the replica; dials sent there
	cfg := Config{
		SentinelMaster: testenv.SentinelMaster, SentinelAddrs: s.Sentinels, KeyPrefix: prefix,
		WaitReplicas: 1, WaitTimeout: 5 * time.Second,
		dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == s.Primary && stale.Add(-1) >= 0 {
				addr = s.Replica // what a sentinel behind the failover names
				redirected.Add(1)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	b := newTestRedisBroker(t, cfg)
	if err := b.Ping(ctx); err != nil { // a command connection to the primary
		t.Fatal(err)
	}
	stale.Store(1) // the pipeline's first connection
	key := fanout.Key{Tenant: "acme", Channel: "stale"}
	var want []string
	for i := range 3 {
		p, err := b.Publish(ctx, fanouttest.Msg(key, fmt.Sprintf("m%d", i)))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		want = append(want, p.ID)
	}
	if got := fanouttest.IDs(fanouttest.History(t, b, key)); !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	if n := redirected.Load(); n != 1 {
		t.Fatalf("%d dials sent to the replica, want 1", n)
	}
}

// TestRedisSentinelOldPrimaryAsPrimaryIsNotUsed: after a failover, a
// sentinel cut off from the others still names the old primary, and a
// server there answers as a primary (the old one back, before the
// sentinels make it a replica: a split brain). go-redis asks that
// sentinel, and keeps asking it (the first that answered). The broker's
// connections must still go to the primary the sentinels name with the
// newest configuration epoch: the node's subscription is there, a
// publication is in that primary's history, and the other server holds
// nothing.
func TestRedisSentinelOldPrimaryAsPrimaryIsNotUsed(t *testing.T) {
	t.Parallel()
	s := testenv.StartRedisSentinel(t)
	stale := testenv.StartRedis(t) // the old primary, back as a primary
	lone := s.StartLoneSentinel(stale.Addr)
	s.Failover()
	_, prefix := testenv.Redis(t)
	// go-redis asks its sentinels at once and keeps the first that
	// answers, and then subscribes to its announcements on a connection of
	// its own: the other sentinel is dialed only after that, the second
	// dial to the lone one.
	loneChosen := make(chan struct{})
	var loneDials atomic.Int32
	node := newRedisNode(t, Config{
		SentinelMaster: testenv.SentinelMaster, SentinelAddrs: []string{lone, s.Sentinels[0]}, KeyPrefix: prefix,
		dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == s.Sentinels[0] {
				select {
				case <-loneChosen:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if addr == lone && err == nil && loneDials.Add(1) == 2 {
				close(loneChosen)
			}
			return c, err
		},
	})
	// Plain clients of each server.
	primary := newTestRedisBroker(t, Config{URL: "redis://" + s.Replica + "/0", KeyPrefix: prefix})
	old := rawRedis(t, stale.URL())

	key, sub, _ := subscribedBefore(t, node, primary, "splitbrain")
	p := fanouttest.MustPublish(t, node.broker, fanouttest.Msg(key, "through-sentinel"))
	if got := fanouttest.IDs(fanouttest.History(t, primary, key)); !slices.Equal(got, []string{"before", p.ID}) {
		t.Fatalf("the primary's history %v, want [before %s]", got, p.ID)
	}
	if got := sub.Receive(t, 1); got[0].Position() != p.Position {
		t.Fatalf("got %v, want %v", got[0].Position(), p.Position)
	}
	if n, err := old.DBSize(fanouttest.Context(t)).Result(); err != nil || n != 0 {
		t.Fatalf("the old primary holds %d keys (%v), want none", n, err)
	}
}

func TestRedisNewestPrimary(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		views []sentinelView
		want  string // "" for an error
	}{
		{nil, ""},
		{[]sentinelView{{primary: "a:1", epoch: 0}}, "a:1"},
		// The newest configuration wins, however few name it.
		{[]sentinelView{{primary: "old:1", epoch: 3}, {primary: "old:1", epoch: 3}, {primary: "new:1", epoch: 4}}, "new:1"},
		// Among the newest, the most named.
		{[]sentinelView{{primary: "x:1", epoch: 2}, {primary: "p:1", epoch: 2}, {primary: "p:1", epoch: 2}}, "p:1"},
		// As many name each: no answer.
		{[]sentinelView{{primary: "x:1", epoch: 2}, {primary: "p:1", epoch: 2}, {primary: "q:1", epoch: 1}}, ""},
	} {
		got, err := newestPrimary(c.views)
		if (c.want == "") != (err != nil) || got != c.want && c.want != "" {
			t.Errorf("newestPrimary(%+v) = %q, %v; want %q", c.views, got, err, c.want)
		}
	}
}
