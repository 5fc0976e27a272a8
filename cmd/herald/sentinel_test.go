package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
)

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
	st := pgStager{dbURL}
	sub := openSSE(t, base+"/v1/sse?channel=orders/7", mint(t, "acme", "u1", "orders/**"), "")
	if sub.Status != http.StatusOK {
		t.Fatalf("subscribe: %d %s", sub.Status, sub.Body)
	}
	sub.next(t, 5*time.Second) // subscribed
	first := st.stage(t, notification("acme", "orders/7", `{"n":1}`), true)
	if e, _ := sub.nextPublication(t, 10*time.Second); e.ID != first || e.Offset != 1 {
		t.Fatalf("got %+v, want %s at offset 1", e, first)
	}

	s.Kill(s.Primary)
	waitStatus(t, base+"/readyz", http.StatusServiceUnavailable)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if now, err := s.PrimaryNow(ctx); err == nil && now != s.Primary {
			s.RestartAsReplica(s.Primary, now)
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the sentinels promoted no replica")
		case <-time.After(20 * time.Millisecond):
		}
	}
	second := st.stage(t, notification("acme", "orders/7", `{"n":2}`), true)
	if e, _ := sub.nextPublication(t, 20*time.Second); e.ID != second || e.Offset != 2 {
		t.Fatalf("after the failover got %+v, want %s at offset 2", e, second)
	}
	waitReady(t, base)
	if n := metricValue(t, base, "herald_redis_pubsub_stalls_total"); n < 1 {
		t.Fatalf("herald_redis_pubsub_stalls_total = %v, want ≥ 1", n)
	}
}
