package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

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

	onB := openSSE(t, nodeB+"/v1/sse?channel=orders/9", tok, "")
	if onB.Status != http.StatusOK {
		t.Fatalf("node B: %d %s", onB.Status, onB.Body)
	}
	onB.next(t, 5*time.Second) // subscribed
	first := st.stage(t, notification("acme", "orders/9", `{"n":1}`), true)
	e, cursor := onB.nextPublication(t, 10*time.Second)
	if e.ID != first || e.Offset != 1 {
		t.Fatalf("node B got %+v, want %s at offset 1", e, first)
	}
	onB.Close()

	second := st.stage(t, notification("acme", "orders/9", `{"n":2}`), true)
	// Wait until the Worker on node A has published it (visible on A live).
	onA := openSSE(t, nodeA+"/v1/sse?channel=orders/9", tok, cursor)
	if onA.Status != http.StatusOK {
		t.Fatalf("node A: %d %s", onA.Status, onA.Body)
	}
	ev := onA.next(t, 5*time.Second)
	if ev.Event != "subscribed" || !strings.Contains(ev.Data, `"recovered":true`) {
		t.Fatalf("resume on node A with node B's cursor: %q %s", ev.Event, ev.Data)
	}
	e, _ = onA.nextPublication(t, 10*time.Second)
	if e.ID != second || e.Offset != 2 {
		t.Fatalf("node A resumed with %+v, want %s at offset 2", e, second)
	}
	onA.expectQuiet(t, 300*time.Millisecond)
}
