package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestLaggardCatchUpBrokers: over each broker (in memory, Redis streams, a
// Redis Cluster) and each transport, a subscriber that stops reading while
// publications go on falls behind its queue bound, then reads again and
// receives every publication exactly once, in order, from the history and
// then live; it is never disconnected.
func TestLaggardCatchUpBrokers(t *testing.T) {
	for _, broker := range []string{"", "redis", "cluster"} {
		for _, transport := range []string{transportSSE, transportWS} {
			name := broker
			if name == "" {
				name = "memory"
			}
			t.Run(name+"/"+transport, func(t *testing.T) {
				t.Parallel()
				testLaggardCatchUp(t, broker, transport)
			})
		}
	}
}

func testLaggardCatchUp(t *testing.T, broker, transport string) {
	const history = 4096
	e := newEnv(t, envOptions{broker: broker, history: history, cfg: Config{
		QueueMaxMessages: 4, QueueMaxBytes: 64 << 10, WriteTimeout: time.Hour,
		HeartbeatInterval: time.Hour, ClientTimeout: 2 * time.Hour,
	}})
	ts := smallBufferServer(t, e)
	addr := ts.Listener.Addr().String()
	data := `"` + strings.Repeat("x", 4<<10) + `"`

	var next func() uint64 // the offset of the next publication the client reads
	switch transport {
	case transportSSE:
		c := openStalledAt(t, addr, e.token("acme", "u1", "orders/*"), testRecvBuffer)
		next = func() uint64 { return c.publicationOffset(t) }
	case transportWS:
		c, _, err := dialWSURL(t, "ws://"+addr, dialOpts{client: smallRecvClient(t)}, e.client)
		if err != nil {
			t.Fatal(err)
		}
		c.connect(e.wsToken("u1", []string{"orders/*"}, nil))
		c.subscribe("orders/1", nil)
		c.stall()
		defer c.resume()
		next = func() uint64 {
			c.resume()
			return c.pub().Offset
		}
	}

	// Publish while the client does not read, until its queue dropped
	// publications (a few more than that, so it lags in the middle of them).
	catchUps := e.srv.metrics.catchUps.WithLabelValues(transport)
	published := uint64(0)
	for extra := 0; extra < 20; {
		if published == history/2 {
			t.Fatalf("the client never lagged in %d publications", published)
		}
		e.publish("acme", "orders/1", data)
		published++
		if e.counter(catchUps) > 0 {
			extra++
		}
	}
	// Then it reads; publications go on meanwhile.
	for want, end := uint64(1), published+20; want <= end; want++ {
		if want > published {
			e.publish("acme", "orders/1", data)
			published++
		}
		if got := next(); got != want {
			t.Fatalf("offset %d, want %d (published %d)", got, want, published)
		}
	}
	for _, r := range Reasons {
		if n := e.counter(e.srv.metrics.disconnects.WithLabelValues(transport, r.Code)); n != 0 {
			t.Fatalf("%v connections ended as %s", n, r.Code)
		}
	}
}

// publicationOffset reads the stalled client's stream up to its next
// publication and returns the publication's offset; any other event fails.
func (c *stalledClient) publicationOffset(t *testing.T) uint64 {
	t.Helper()
	off, ev := c.nextEvent(t)
	if ev != "" {
		t.Fatalf("%s event where a publication was expected", ev)
	}
	return off
}

// nextEvent reads the stalled client's stream up to its next publication
// (returning its offset and "") or disconnect event (returning 0 and
// "disconnect"); other events are skipped.
func (c *stalledClient) nextEvent(t *testing.T) (uint64, string) {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	event := ""
	for {
		line, err := c.br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event: "))
		case strings.HasPrefix(line, "data: ") && event == "":
			var p struct {
				Offset uint64 `json:"offset"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &p); err != nil {
				t.Fatalf("publication %q: %v", line, err)
			}
			return p.Offset, ""
		case strings.HasPrefix(line, "data: ") && event == "disconnect":
			var d struct {
				Reason string `json:"reason"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil || d.Reason != "slow" {
				t.Fatalf("disconnect %q (%v), want reason slow", line, err)
			}
			return 0, "disconnect"
		case line == "\n":
			event = ""
		}
	}
}
