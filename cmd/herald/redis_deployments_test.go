package main

// herald serve on each Redis deployment it supports: nodes sharing a
// standalone Redis or a Redis Cluster, and a node following a Sentinel
// failover.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heraldgw/herald/internal/testenv"
)

// TestTwoNodesShareRedis runs a Worker node and a pure edge node over one
// PostgreSQL outbox and one Redis: a record dispatched by the first reaches
// a subscriber of the second, and a client resumes on either node with the
// cursor the other gave it.
func TestTwoNodesShareRedis(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	redisURL, prefix := testenv.Redis(t)
	common := []string{"--database-url", dbURL, "--redis-url", redisURL, "--redis-key-prefix", prefix}
	nodeA := startServe(t, common...)
	nodeB := startServe(t, append(common, "--feed=false")...)
	st := pgStager{dbURL}
	tok := mint(t, "acme", "u1", "orders/**")

	onB := subscribeSSE(t, nodeB+"/v1/sse?channel=orders/9", tok, "")
	first := st.stage(t, notification("acme", "orders/9", `{"n":1}`), true)
	e, cursor := onB.nextPublication(t, 10*time.Second)
	if e.ID != first || e.Offset != 1 {
		t.Fatalf("node B got %+v, want %s at offset 1", e, first)
	}
	onB.Close()

	second := st.stage(t, notification("acme", "orders/9", `{"n":2}`), true)
	// Wait until the Worker on node A has published it (visible on A live).
	onA := subscribeSSE(t, nodeA+"/v1/sse?channel=orders/9", tok, cursor)
	if !strings.Contains(onA.Subscribed, `"recovered":true`) {
		t.Fatalf("resume on node A with node B's cursor: subscribed %s", onA.Subscribed)
	}
	e, _ = onA.nextPublication(t, 10*time.Second)
	if e.ID != second || e.Offset != 2 {
		t.Fatalf("node A resumed with %+v, want %s at offset 2", e, second)
	}
	onA.expectNextMarker(t, st, "acme", "orders/9", 3)
}

// TestTwoNodesShareRedisCluster runs two nodes over one PostgreSQL outbox
// and a 3-primary Redis Cluster (--redis-cluster): a ticket issued by one
// node is redeemed on the other (once), and a record dispatched by the
// first reaches a subscriber of the second.
func TestTwoNodesShareRedisCluster(t *testing.T) {
	cluster := testenv.StartRedisCluster(t)
	dbURL := testenv.DatabaseURL(t)
	redisURL := "redis://" + cluster.Addrs[0] + "?addr=" + cluster.Addrs[1] + "&addr=" + cluster.Addrs[2]
	common := []string{"--database-url", dbURL, "--redis-url", redisURL, "--redis-cluster"}
	nodeA := startServe(t, common...)
	nodeB := startServe(t, append(common, "--feed=false")...)
	tok := mint(t, "acme", "u1", "orders/**")

	// A ticket from node A, redeemed on node B: tickets live in the cluster.
	status, body := postTicket(t, nodeA, tok)
	var tr struct {
		Ticket string `json:"ticket"`
	}
	if status != http.StatusOK || json.Unmarshal([]byte(body), &tr) != nil || tr.Ticket == "" {
		t.Fatalf("POST /v1/tickets on node A: %d %s", status, body)
	}
	onB := subscribeSSE(t, nodeB+"/v1/sse?"+url.Values{"channel": {"orders/7"}, "ticket": {tr.Ticket}}.Encode(), "", "")
	defer onB.Close()

	// A record staged in the outbox, dispatched by node A's Worker through
	// the cluster, reaches node B's subscriber.
	st := pgStager{dbURL}
	id := st.stage(t, notification("acme", "orders/7", `{"n":1}`), true)
	if e, _ := onB.nextPublication(t, 10*time.Second); e.ID != id || e.Offset != 1 {
		t.Fatalf("node B got %+v, want %s at offset 1", e, id)
	}

	// The ticket was single-use across nodes.
	again := openSSE(t, nodeA+"/v1/sse?"+url.Values{"channel": {"orders/7"}, "ticket": {tr.Ticket}}.Encode(), "", "")
	defer again.Close()
	if again.Status != http.StatusUnauthorized || !strings.Contains(again.Body, "single-use") {
		t.Fatalf("the used ticket on node A: %d %s", again.Status, again.Body)
	}
}

// TestServeFollowsSentinelFailover: herald serve on a Redis Sentinel
// deployment (a primary, a replica, three sentinels). A subscriber gets a
// record; the primary is killed (SIGKILL); /readyz answers 503 while the
// node's subscription is stalled; once the sentinels promoted the replica
// (and the old primary is back as its replica, for
// --redis-wait-replicas 1) the next record reaches the same subscriber,
// /readyz answers 200 again, and herald_redis_pubsub_stalls_total counted
// the stall.
func TestServeFollowsSentinelFailover(t *testing.T) {
	s := testenv.StartRedisSentinel(t)
	dbURL := testenv.DatabaseURL(t)
	_, prefix := testenv.Redis(t)
	base := startServe(t, "--database-url", dbURL, "--redis-key-prefix", prefix,
		"--redis-sentinel-master", testenv.SentinelMaster, "--redis-sentinel-addrs", strings.Join(s.Sentinels, ","),
		"--redis-heartbeat-interval", "100ms", "--redis-wait-replicas", "1", "--redis-wait-timeout", "200ms")
	waitReady(t, base)
	began := time.Now()
	phase := func(what string) { t.Logf("%6.2fs %s", time.Since(began).Seconds(), what) }
	st := pgStager{dbURL}
	sub := subscribeSSE(t, base+"/v1/sse?channel=orders/7", mint(t, "acme", "u1", "orders/**"), "")
	first := st.stage(t, notification("acme", "orders/7", `{"n":1}`), true)
	if e, _ := sub.nextPublication(t, 10*time.Second); e.ID != first || e.Offset != 1 {
		t.Fatalf("got %+v, want %s at offset 1", e, first)
	}

	phase("first record received")
	// The sentinels count the primary down only when the test lets them:
	// a failover quicker than one /readyz answer (each may wait for the
	// dead primary) would otherwise end the stall between two readings,
	// and the node would never be seen unready.
	setDownAfter(t, s, 10*time.Minute)
	s.Kill(s.Primary)
	waitStatus(t, base+"/readyz", http.StatusServiceUnavailable)
	phase("primary killed; unready")
	setDownAfter(t, s, testenv.SentinelDownAfter)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if now, err := s.PrimaryNow(ctx); err == nil && now != s.Primary {
			phase("replica promoted")
			s.RestartAsReplica(s.Primary, now)
			phase("old primary restarted as its replica")
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the sentinels promoted no replica")
		case <-time.After(20 * time.Millisecond):
		}
	}
	second := st.stage(t, notification("acme", "orders/7", `{"n":2}`), true)
	phase("second record staged")
	if e, _ := sub.nextPublication(t, 20*time.Second); e.ID != second || e.Offset != 2 {
		t.Fatalf("after the failover got %+v, want %s at offset 2", e, second)
	}
	phase("second record received")
	waitReady(t, base)
	phase("ready")
	if n := metricValue(t, base, "herald_redis_pubsub_stalls_total"); n < 1 {
		t.Fatalf("herald_redis_pubsub_stalls_total = %v, want ≥ 1", n)
	}
}

// setDownAfter sets how long every sentinel of s waits before it counts
// the primary down (SENTINEL SET down-after-milliseconds).
func setDownAfter(t *testing.T, s *testenv.RedisSentinel, d time.Duration) {
	t.Helper()
	for _, addr := range s.Sentinels {
		cl := redis.NewSentinelClient(&redis.Options{Addr: addr})
		err := cl.Set(context.Background(), testenv.SentinelMaster, "down-after-milliseconds", strconv.FormatInt(d.Milliseconds(), 10)).Err()
		_ = cl.Close()
		if err != nil {
			t.Fatalf("sentinel %s: set down-after-milliseconds %v: %v", addr, d, err)
		}
	}
}
