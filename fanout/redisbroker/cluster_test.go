package redisbroker

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testCluster is the shared test cluster, with the fanout tests' own
// helpers below.
type testCluster struct {
	*testenv.RedisCluster
	t *testing.T
}

func startTestCluster(t *testing.T) *testCluster {
	t.Helper()
	return &testCluster{RedisCluster: testenv.StartRedisCluster(t), t: t}
}

// owner is the index of the node that owns slot, as node 0 sees it.
func (c *testCluster) owner(slot int) int {
	t := c.t
	t.Helper()
	shards, err := c.Node(0).ClusterShards(fanouttest.Context(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if slot < int(r.Start) || slot > int(r.End) {
				continue
			}
			for _, n := range sh.Nodes {
				for i, a := range c.Addrs {
					if n.Role == "master" && net.JoinHostPort(n.IP, strconv.Itoa(int(n.Port))) == a {
						return i
					}
				}
			}
		}
	}
	t.Fatalf("slot %d has no owner", slot)
	return -1
}

// moveSlot moves slot, with its keys, from node from to node to, the way
// redis-cli --cluster reshard does.
func (c *testCluster) moveSlot(slot, from, to int) {
	t := c.t
	t.Helper()
	ctx := fanouttest.Context(t)
	src, dst := c.Node(from), c.Node(to)
	srcID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := dst.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	keys, err := src.ClusterGetKeysInSlot(ctx, slot, 1000).Result()
	must(err)
	if len(keys) > 0 {
		host, port, _ := net.SplitHostPort(c.Addrs[to])
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(src.Do(ctx, args...).Err())
	}
	for _, i := range []int{to, from, 3 - to - from} {
		must(c.Node(i).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	}
}

// pubsubConns counts the pub/sub connections named name on node i.
func (c *testCluster) pubsubConns(i int, name string) int {
	t := c.t
	t.Helper()
	list, err := c.Node(i).ClientList(fanouttest.Context(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.SplitSeq(list, "\n") {
		if strings.Contains(line, " name="+name+" ") && strings.Contains(line, " flags=P ") {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds or the test's deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx := fanouttest.Context(t)
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// channelOn is a channel of channels (as clusterChannels returns them)
// whose slot node owns.
func channelOn(channels map[fanout.Key]int, node int) fanout.Key {
	for k, n := range channels {
		if n == node {
			return k
		}
	}
	return fanout.Key{}
}

// clusterChannels returns per channel key the node owning its slot, with
// perNode channels on each of the cluster's nodes.
func clusterChannels(t *testing.T, c *testCluster, b *Broker, perNode int) map[fanout.Key]int {
	t.Helper()
	out := make(map[fanout.Key]int)
	count := make([]int, len(c.Addrs))
	for i := 0; len(out) < perNode*len(c.Addrs); i++ {
		k := fanout.Key{Tenant: "acme", Channel: fmt.Sprintf("orders/%d", i)}
		n := c.owner(keySlot(b.topic(k)))
		if count[n] < perNode {
			count[n]++
			out[k] = n
		}
	}
	return out
}

// clusterPair starts a test cluster and two nodes on it, a and b; name
// is b's client name.
func clusterPair(t *testing.T) (c *testCluster, a, b redisNode, name string) {
	t.Helper()
	c = startTestCluster(t)
	name = "herald-test-" + testenv.Suffix()
	return c, newClusterNode(t, c, "herald-a-"+testenv.Suffix()), newClusterNode(t, c, name), name
}

func newClusterNode(t *testing.T, c *testCluster, name string) redisNode {
	t.Helper()
	url := "redis://" + c.Addrs[0] + "?client_name=" + name
	return newRedisNode(t, Config{URL: url, Cluster: true, HealthCheckInterval: 200 * time.Millisecond})
}

func (b *Broker) shardCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.shards)
}

func (b *Broker) shardOf(k fanout.Key) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st := b.topics[b.topic(k)]; st != nil && st.shard != nil {
		return st.shard.addr
	}
	return ""
}

func TestRedisClusterConfig(t *testing.T) {
	t.Parallel()
	if got := (Config{URL: "redis://x", Cluster: true}).withDefaults(); !got.Sharded {
		t.Fatal("Cluster must imply Sharded")
	}
	b, err := New(Config{URL: "redis://127.0.0.1:1?addr=127.0.0.1:2", Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	b.Stop()
	for _, u := range []string{"unix:///tmp/redis.sock", "redis://host:1?nosuch=1"} {
		if _, err := New(Config{URL: u, Cluster: true}); !errors.Is(err, fanout.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want fanout.ErrInvalidConfig", u, err)
		}
	}
	for k, want := range map[string]int{"123456789": 0x31C3 % 16384, "{user1000}.following": 3443, "foo{}{bar}": keySlot("foo{}{bar}")} {
		if got := keySlot(k); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", k, got, want)
		}
	}
}

// TestRedisClusterFence runs the fence cases on one cluster, with a key
// prefix per case, so their channels spread over the three primaries.
func TestRedisClusterFence(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t)
	fanouttest.RunFence(t, func(t *testing.T, historySize int) fanout.Broker {
		return newTestRedisBroker(t, Config{
			URL: "redis://" + c.Addrs[0], Cluster: true, HistorySize: historySize,
			KeyPrefix: "herald_t_" + testenv.Suffix() + ":",
		})
	})
}

// TestRedisClusterRecover runs the Recover cases (pages included) on one
// cluster, with a key prefix per case.
func TestRedisClusterRecover(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t)
	fanouttest.RunRecover(t, func(t *testing.T) fanout.Broker {
		return newTestRedisBroker(t, Config{
			URL: "redis://" + c.Addrs[0], Cluster: true, HistorySize: 3,
			KeyPrefix: "herald_t_" + testenv.Suffix() + ":",
		})
	})
}

// TestRedisClusterTwoNodes: node A publishes on channels of all three
// shards, node B receives each channel in order over one SSUBSCRIBE
// connection per shard, and drops a shard's connection with its last
// channel.
func TestRedisClusterTwoNodes(t *testing.T) {
	t.Parallel()
	c, a, b, name := clusterPair(t)
	channels := clusterChannels(t, c, b.broker, 2)
	subs := make(map[fanout.Key]*fanouttest.Sub)
	for k := range channels {
		subs[k] = fanouttest.NewSub(100)
		if err := b.hub.Subscribe(fanouttest.Context(t), k, subs[k]); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.broker.shardCount(); n != 3 {
		t.Fatalf("broker holds %d pub/sub shards, want 3", n)
	}
	for i := range c.Addrs {
		if n := c.pubsubConns(i, name); n != 1 {
			t.Fatalf("node %s has %d pub/sub connections of the broker, want 1", c.Addrs[i], n)
		}
	}
	const n = 20
	for i := range n {
		for k := range channels {
			fanouttest.MustPublish(t, a.broker, fanouttest.Msg(k, fmt.Sprintf("m%d", i)))
		}
	}
	for k, s := range subs {
		for i, p := range s.Receive(t, n) {
			if p.Key() != k || p.Position().Offset != uint64(i+1) {
				t.Fatalf("%v delivery %d: %v at %v", k, i, p.Key(), p.Position())
			}
		}
	}
	// Unsubscribing the last channels of one shard closes its connection.
	for k, node := range channels {
		if node == 0 {
			if err := b.hub.Unsubscribe(fanouttest.Context(t), k, subs[k]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := b.broker.shardCount(); n != 2 {
		t.Fatalf("broker holds %d pub/sub shards after leaving node 0, want 2", n)
	}
	waitFor(t, "the pub/sub connection to node 0 to close", func() bool { return c.pubsubConns(0, name) == 0 })
	for _, node := range []redisNode{a, b} {
		if v := testutil.ToFloat64(node.broker.m.reconnects); v != 0 {
			t.Fatalf("reconnects = %v on a healthy cluster", v)
		}
	}
}

// subscribeEach picks perNode channels on each of c's nodes (see
// clusterChannels), subscribes a resync-aware subscriber to each on node
// b and checks that a publication from node a reaches it.
func subscribeEach(t *testing.T, c *testCluster, a, b redisNode, perNode int) (map[fanout.Key]int, map[fanout.Key]fanouttest.ResyncSub) {
	t.Helper()
	channels := clusterChannels(t, c, b.broker, perNode)
	subs := make(map[fanout.Key]fanouttest.ResyncSub, len(channels))
	for k := range channels {
		subs[k] = fanouttest.ResyncSub{Sub: fanouttest.NewSub(100)}
		if err := b.hub.Subscribe(fanouttest.Context(t), k, subs[k]); err != nil {
			t.Fatal(err)
		}
		fanouttest.MustPublish(t, a.broker, fanouttest.Msg(k, "before"))
		subs[k].Receive(t, 1)
	}
	return channels, subs
}

// TestRedisClusterSlotMigration: a subscribed channel's slot moves to
// another primary; the broker follows it there, resyncs it, and delivery
// goes on.
func TestRedisClusterSlotMigration(t *testing.T) {
	t.Parallel()
	c, a, b, name := clusterPair(t)
	channels, subs := subscribeEach(t, c, a, b, 1)
	moved := channelOn(channels, 0)
	slot := keySlot(b.broker.topic(moved))
	c.moveSlot(slot, 0, 1)

	if k := subs[moved].WaitResync(t, "no resync after the channel's slot moved"); k != moved {
		t.Fatalf("resync for %v, want %v", k, moved)
	}
	if got := b.broker.shardOf(moved); got != c.Addrs[1] {
		t.Fatalf("%v subscribed on %q, want %s", moved, got, c.Addrs[1])
	}
	waitFor(t, "the pub/sub connection to node 0 to close", func() bool { return c.pubsubConns(0, name) == 0 })
	if n := c.pubsubConns(1, name); n != 1 {
		t.Fatalf("node 1 has %d pub/sub connections of the broker, want 1", n)
	}
	for k := range channels {
		p := fanouttest.MustPublish(t, a.broker, fanouttest.Msg(k, "after"))
		if p.Offset != 2 {
			t.Fatalf("%v: offset after the move %v, want 2 (history moved with the slot)", k, p.Position)
		}
		if got := subs[k].Receive(t, 1); got[0].Position() != p.Position {
			t.Fatalf("%v: got %v, want %v", k, got[0].Position(), p.Position)
		}
		if k != moved && len(subs[k].Resyncs) != 0 {
			t.Fatalf("%v resynced though its slot did not move", k)
		}
	}
	if v := testutil.ToFloat64(b.broker.m.reconnects); v != 0 {
		t.Fatalf("reconnects = %v; a slot move is not a reconnect", v)
	}
}

// TestRedisClusterNodeRestart: a primary's process dies and comes back on
// the same port; the broker reconnects, resyncs its channels there, and
// delivery resumes.
func TestRedisClusterNodeRestart(t *testing.T) {
	t.Parallel()
	c, a, b, _ := clusterPair(t)
	channels, subs := subscribeEach(t, c, a, b, 1)
	victim := channelOn(channels, 2)
	c.Kill(2)
	c.Start(2)
	c.WaitOK(2)
	if k := subs[victim].WaitResync(t, "no resync after the node restarted"); k != victim {
		t.Fatalf("resync for %v, want %v", k, victim)
	}
	if v := testutil.ToFloat64(b.broker.m.reconnects); v != 1 {
		t.Fatalf("herald_redis_pubsub_reconnects_total = %v, want 1", v)
	}
	for k := range channels {
		// The publisher's pooled connection to the restarted node is dead:
		// go-redis retries on a new one.
		var (
			p   fanout.Publication
			err error
		)
		waitFor(t, "a publication to "+k.Channel, func() bool {
			p, err = a.broker.Publish(fanouttest.Context(t), fanouttest.Msg(k, "after"))
			return err == nil
		})
		if got := subs[k].Receive(t, 1); got[0].Position() != p.Position {
			t.Fatalf("%v: got %v, want %v", k, got[0].Position(), p.Position)
		}
		if k != victim && len(subs[k].Resyncs) != 0 {
			t.Fatalf("%v resynced though its node did not restart", k)
		}
	}
}
