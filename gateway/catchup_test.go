package gateway

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/wstest"
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
		c := dialSlow(t, e, ts, wstest.DialOpts{}, "orders/*")
		c.Subscribe("orders/1", nil)
		c.Stall()
		defer c.Resume()
		next = func() uint64 {
			c.Resume()
			return c.Pub().Offset
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
	for _, r := range session.Reasons {
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
			// The envelope's offset comes before its data: read it without
			// decoding the whole publication (these tests move megabytes).
			i := strings.Index(line, `"offset":`)
			if i < 0 {
				t.Fatalf("publication without an offset: %.200q", line)
			}
			rest := line[i+len(`"offset":`):]
			end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
			off, err := strconv.ParseUint(rest[:max(end, 0)], 10, 64)
			if err != nil {
				t.Fatalf("publication offset in %.200q: %v", line, err)
			}
			return off, ""
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

// TestBurstDoesNotCutHealthyReaders: 2,000 publications of 16 KB in one
// burst on one channel (in a history of 2,000). A healthy SSE reader and a
// healthy WebSocket reader each receive all of them in order, catching up
// from the history whenever the burst outruns their queues; a reader that
// stopped reading altogether is ended as slow once publications go on past
// the history. The heap stays bounded by the history plus what the readers
// hold (its peak is logged).
func TestBurstDoesNotCutHealthyReaders(t *testing.T) {
	const (
		burst   = 2000
		history = 2000
	)
	// WriteTimeout: the test's readers decode under the race detector on a
	// busy machine; they must not be cut for being slow to read a write.
	e := newEnv(t, envOptions{history: history, cfg: Config{HistorySize: history, MaxConnectionsPerUser: -1, WriteTimeout: time.Hour}})
	ts := smallBufferServer(t, e)
	addr := ts.Listener.Addr().String()
	tok := e.token("acme", "u1", "orders/*")
	sse := openStalledAt(t, e.srv.Addr(), tok, 0) // reads at once, below
	ws := e.dialWS(wstest.DialOpts{Fast: true})
	ws.Connect(e.wsToken("u1", []string{"orders/*"}, nil))
	ws.Subscribe("orders/1", nil)
	openStalledAt(t, addr, tok, testRecvBuffer) // never reads again

	// The readers check every offset as it arrives.
	var lastSSE, lastWS atomic.Uint64
	failed := make(chan error, 1)
	fail := func(err error) {
		select {
		case failed <- err:
		default: // one is enough
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	read := func(transport string, last *atomic.Uint64, next func() uint64) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			got := next()
			if want := last.Load() + 1; got != want {
				fail(fmt.Errorf("%s reader: offset %d, want %d", transport, got, want))
				return
			}
			last.Store(got)
		}
	}
	wg.Go(func() { read(transportSSE, &lastSSE, func() uint64 { return sse.publicationOffset(t) }) })
	wg.Go(func() {
		read(transportWS, &lastWS, func() uint64 {
			f := ws.NextFrame(time.Minute)
			if f.Push != "pub" {
				fail(fmt.Errorf("ws reader: %.200s", f.Raw))
			}
			return f.Pub.Offset
		})
	})
	defer func() {
		close(stop)
		e.publish("acme", "orders/1", `"last"`) // unblocks both readers
		wg.Wait()
	}()
	caughtUp := func(n uint64) func() bool {
		return func() bool {
			select {
			case err := <-failed:
				t.Fatal(err)
			default:
			}
			return lastSSE.Load() >= n && lastWS.Load() >= n
		}
	}

	data := `"` + strings.Repeat("x", 16<<10) + `"`
	heapBefore := heapInUse()
	var peak uint64
	for i := range burst {
		e.publish("acme", "orders/1", data)
		if i%250 == 0 {
			peak = max(peak, heapInUse())
		}
	}
	eventually(t, 5*time.Minute, "both readers to receive the whole burst", caughtUp(burst))
	peak = max(peak, heapInUse())

	// Publications go on past the history: the reader that stopped reading
	// is ended, the healthy ones receive them.
	published := uint64(burst)
	slow := e.srv.metrics.disconnects.WithLabelValues(transportSSE, "slow")
	for e.counter(slow) == 0 {
		if published == 2*burst {
			t.Fatalf("the stalled reader was not ended after %d publications", published)
		}
		e.publish("acme", "orders/1", data)
		published++
		eventually(t, time.Minute, fmt.Sprintf("both readers to receive offset %d", published), caughtUp(published))
	}
	for _, tr := range []string{transportSSE, transportWS} {
		if n := e.counter(e.srv.metrics.connections.WithLabelValues(tr)); n != 1 {
			t.Fatalf("herald_connections{%s} = %v, want 1 (the healthy reader)", tr, n)
		}
	}
	// The history holds 2,000 publications of 16 KB (the data and, while
	// the burst is being fanned out, their encoded envelopes); the rest is
	// the readers' queues, pages and the test clients' own buffers.
	bound := uint64(2*history*(16<<10+1024)) + 16<<20
	t.Logf("a burst of %d publications of 16 KiB; the stalled reader ended after %d; heap before %d KiB, peak %+d KiB (bound %d KiB); catch-ups: sse %v, ws %v",
		burst, published, heapBefore>>10, (int64(peak)-int64(heapBefore))>>10, bound>>10,
		e.counter(e.srv.metrics.catchUps.WithLabelValues(transportSSE)), e.counter(e.srv.metrics.catchUps.WithLabelValues(transportWS)))
	if peak > heapBefore+bound {
		t.Fatalf("heap peaked %d KiB above its start, bound %d KiB", (peak-heapBefore)>>10, bound>>10)
	}
}
