package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
)

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
	onB := openSSE(t, nodeB+"/v1/sse?"+url.Values{"channel": {"orders/7"}, "ticket": {tr.Ticket}}.Encode(), "", "")
	if onB.Status != http.StatusOK {
		t.Fatalf("node B with node A's ticket: %d %s", onB.Status, onB.Body)
	}
	defer onB.Close()
	if ev := onB.next(t, 5*time.Second); ev.Event != "subscribed" {
		t.Fatalf("node B: first event %q %s", ev.Event, ev.Data)
	}

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
