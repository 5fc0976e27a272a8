package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// These tests drive a whole server: clients that stop reading (laggards)
// catch up through the server's handler on small socket buffers (shared
// with the SSE slow-client tests), over each broker and transport, and
// the outcome is read from the clients and from the server's metrics
// (connections, disconnects by reason, queue drops, catch-ups).

// Socket buffer sizes of the slow-client tests: small, so a client that
// stops reading blocks the server's writes after a few KiB instead of the
// megabytes Linux loopback autotuning allows.
const (
	testSendBuffer = 4 << 10
	testRecvBuffer = 4 << 10
)

// smallBufferServer serves e's handler on 127.0.0.1:0 with a small send
// buffer on the server side of every connection.
func smallBufferServer(t *testing.T, e *testEnv) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(e.srv.Handler())
	ts.Listener = sendBufferListener{ts.Listener}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

type sendBufferListener struct{ net.Listener }

func (l sendBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(testSendBuffer)
	}
	return c, err
}

// dialSlow opens /v1/ws on ts, a smallBufferServer, through a
// smallRecvClient and connects with a token granting subscribe.
func dialSlow(t *testing.T, e *testEnv, ts *httptest.Server, o wstest.DialOpts, subscribe ...string) *wstest.Client {
	t.Helper()
	o.Client = smallRecvClient(t)
	c, _, err := wstest.Dial(t, "ws://"+ts.Listener.Addr().String(), o, e.client)
	if err != nil {
		t.Fatal(err)
	}
	c.Connect(e.wsToken("u1", subscribe, nil))
	return c
}

// smallRecvClient is an HTTP client whose connections have a small
// receive buffer.
func smallRecvClient(t *testing.T) *http.Client {
	d := &net.Dialer{}
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(testRecvBuffer)
			}
			return c, err
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestWSLaggardsCatchUp: among 200 subscribers of one channel, 10 stop
// reading while publications go on. Their queues hit the bound and drop
// what they hold; the heap stays bounded while they sit there (a laggard
// holds a position, not a buffer). The other 190 receive every publication
// in order. When the 10 read again they catch up from the history: each
// receives every publication exactly once and in order, and none is
// disconnected.
func TestWSLaggardsCatchUp(t *testing.T) {
	const (
		total    = 200
		stalled  = 10
		burst    = 4
		payload  = 1 << 10
		after    = 100 // publications after every stalled client lagged
		maxBytes = 32 << 10
		maxMsgs  = 8
		history  = 4096
	)
	e := newEnv(t, envOptions{history: history, cfg: Config{
		QueueMaxBytes: maxBytes, QueueMaxMessages: maxMsgs, ConnectAttemptsPerIP: -1,
		HeartbeatInterval: time.Hour, ClientTimeout: 2 * time.Hour, MaxConnectionsPerUser: -1,
		WriteTimeout: time.Hour,
	}})
	ts := smallBufferServer(t, e)
	base := "ws://" + ts.Listener.Addr().String()
	tok := e.wsToken("u1", []string{"orders/*"}, nil)
	isStalled := func(i int) bool { return i%(total/stalled) == 0 }

	// The clients keep the kernel's receive buffer: on one of a few KiB
	// (smallRecvClient), loopback segments that overrun it are dropped and
	// the server's side retransmits with a backoff that grows while the
	// client stalls (27 s after a minute's stall on a busy machine), so
	// the catch-up would wait on TCP rather than on the server. The
	// server's small send buffer is what blocks its writes early.
	clients := make([]*wstest.Client, total)
	for i := range clients {
		c, _, err := wstest.Dial(t, base, wstest.DialOpts{Fast: true}, e.client)
		if err != nil {
			t.Fatal(err)
		}
		c.Connect(tok)
		c.Subscribe("orders/1", nil)
		clients[i] = c
	}

	// Every client checks each publication as it arrives: the next offset,
	// never a repeat, never a gap.
	last := make([]atomic.Uint64, total)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	check := func(i int) {
		c := clients[i]
		for {
			select {
			case f, ok := <-c.Frames():
				if !ok {
					t.Errorf("client %d was disconnected: %v", i, c.Err())
					return
				}
				if f.Push != "pub" {
					continue
				}
				if want := last[i].Load() + 1; f.Pub.Offset != want {
					t.Errorf("client %d: offset %d, want %d", i, f.Pub.Offset, want)
					return
				}
				last[i].Store(f.Pub.Offset)
			case <-stop:
				return
			}
		}
	}
	for i, c := range clients {
		if isStalled(i) {
			c.Stall()
			continue
		}
		wg.Go(func() { check(i) })
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()

	data := `"` + strings.Repeat("x", payload) + `"`
	published := uint64(0)
	publishBurst := func() {
		t.Helper()
		for range burst {
			e.publish("acme", "orders/1", data)
			published++
		}
		eventually(t, 10*time.Second, fmt.Sprintf("190 clients to receive offset %d", published), func() bool {
			for i := range clients {
				if !isStalled(i) && last[i].Load() < published {
					return false
				}
			}
			return true
		})
	}
	publishBurst()
	heapBefore := heapInUse()

	catchUps := e.srv.metrics.catchUps.WithLabelValues("ws")
	for e.counter(catchUps) < stalled {
		if published > history/2 {
			t.Fatalf("only %v of %d stalled clients lagged after %d publications", e.counter(catchUps), stalled, published)
		}
		publishBurst()
	}
	lagged := published
	heapStalled := heapInUse()
	for published < lagged+after {
		publishBurst()
	}
	heapAfter := heapInUse()

	// Bound: each stalled connection may hold its queue (QueueMaxBytes), a
	// batch buffer being written (ws.BatchBytes) and the frames its client
	// had read before stalling; everything else is shared. Allow that for
	// all ten plus 4 MiB for the test's own bookkeeping and GC noise.
	bound := uint64(stalled*(maxBytes+ws.BatchBytes+256<<10) + 4<<20)
	grow := func(h uint64) int64 { return int64(h) - int64(heapBefore) }
	t.Logf("every stalled client lagged after %d publications of %d B; heap before %d KiB, "+
		"then %+d KiB, after %d more publications %+d KiB (bound %d KiB)",
		lagged, payload, heapBefore>>10, grow(heapStalled)>>10, after, grow(heapAfter)>>10, bound>>10)
	for _, h := range []uint64{heapStalled, heapAfter} {
		if grow(h) > int64(bound) {
			t.Fatalf("heap grew by %d KiB, bound %d KiB", grow(h)>>10, bound>>10)
		}
	}

	// The stalled clients read again and catch up from the history.
	for i, c := range clients {
		if isStalled(i) {
			wg.Go(func() { check(i) })
			c.Resume()
		}
	}
	eventually(t, 60*time.Second, fmt.Sprintf("every client to receive offset %d", published), func() bool {
		for i := range clients {
			if last[i].Load() < published {
				return false
			}
		}
		return true
	})
	if n := e.counter(e.srv.metrics.connections.WithLabelValues("ws")); n != total {
		t.Fatalf("herald_connections{ws} = %v, want %d", n, total)
	}
	for _, r := range session.Reasons {
		if n := e.counter(e.srv.metrics.disconnects.WithLabelValues("ws", r.Code)); n != 0 {
			t.Fatalf("%v connections ended as %s", n, r.Code)
		}
	}
	if e.counter(e.srv.metrics.queueDropped) == 0 {
		t.Fatal("no publication was counted as dropped from a queue")
	}
}

// TestWSLaggardBeyondHistory: a client that stops reading for longer than
// the history reaches is ended as slow once it reads again (disconnect
// push, close code 4001), having received an unbroken prefix; resuming
// from its last position then says recovered:false.
func TestWSLaggardBeyondHistory(t *testing.T) {
	const history = 32
	e := newEnv(t, envOptions{history: history, cfg: Config{
		QueueMaxBytes: 16 << 10, QueueMaxMessages: 8, WriteTimeout: time.Hour,
		HeartbeatInterval: time.Hour, ClientTimeout: 2 * time.Hour,
	}})
	c := dialSlow(t, e, smallBufferServer(t, e), wstest.DialOpts{Buffer: 4096}, "orders/*")
	sub := c.Subscribe("orders/1", nil)
	c.Stall()
	data := `"` + strings.Repeat("x", 1<<10) + `"`
	catchUps := e.srv.metrics.catchUps.WithLabelValues("ws")
	for i := 0; i < 4*history || e.counter(catchUps) == 0; i++ {
		if i > 100*history {
			t.Fatal("the stalled client never lagged")
		}
		e.publish("acme", "orders/1", data)
	}
	c.Resume()
	var lastOffset uint64
	for {
		f := c.NextFrame(30 * time.Second)
		if f.Push == "pub" {
			if f.Pub.Offset != lastOffset+1 {
				t.Fatalf("offset %d after %d", f.Pub.Offset, lastOffset)
			}
			lastOffset = f.Pub.Offset
			continue
		}
		if f.Push == "disconnect" {
			if f.Ctl.Reason != "slow" || !f.Ctl.Reconnect {
				t.Fatalf("disconnect %+v, want slow with reconnect", f.Ctl)
			}
			break
		}
	}
	if _, code := c.Closed(); code != session.CloseSlow {
		t.Fatalf("close code %d, want %d", code, session.CloseSlow)
	}
	eventually(t, 5*time.Second, "the slow disconnect to be counted", func() bool {
		return e.counter(e.srv.metrics.disconnects.WithLabelValues("ws", "slow")) == 1 &&
			e.counter(e.srv.metrics.limitRejections.WithLabelValues(session.LimitQueue)) == 1
	})
	r := e.connected("orders/*")
	res := r.Subscribe("orders/1", &ws.Position{Offset: lastOffset, Epoch: sub.Epoch})
	if res.Recovered {
		t.Fatalf("resumed from offset %d behind a history of %d: %+v", lastOffset, history, res)
	}
}

// TestWSWriteTimeout: a client that stops reading while its queue has room
// is closed with write_timeout once a write misses WriteTimeout.
func TestWSWriteTimeout(t *testing.T) {
	e := newEnv(t, envOptions{history: 10, cfg: Config{
		WriteTimeout: 200 * time.Millisecond, QueueMaxBytes: 64 << 20, QueueMaxMessages: 100000,
	}})
	c := dialSlow(t, e, smallBufferServer(t, e), wstest.DialOpts{}, "orders/*")
	c.Subscribe("orders/1", nil)
	c.Stall()
	data := `"` + strings.Repeat("x", 4<<10) + `"`
	timeout := e.srv.metrics.disconnects.WithLabelValues("ws", "write_timeout")
	for i := 0; e.counter(timeout) == 0; i++ {
		if i == 2000 {
			t.Fatal("no write timeout after 2000 publications")
		}
		e.publish("acme", "orders/1", data)
		if i > 64 {
			eventually(t, 5*time.Second, "a write timeout", func() bool { return e.counter(timeout) == 1 })
		}
	}
}

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
