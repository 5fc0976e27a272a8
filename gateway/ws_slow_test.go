package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// These tests drive a whole server: 200 connections of one channel, the
// laggards among them catching up through the server's handler on small
// socket buffers (shared with the SSE laggard tests), and the outcome is
// read from the server's metrics (connections, disconnects by reason,
// queue drops, catch-ups).

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
	slowHTTP := smallRecvClient(t)
	isStalled := func(i int) bool { return i%(total/stalled) == 0 }

	clients := make([]*wstest.Client, total)
	for i := range clients {
		o := wstest.DialOpts{Fast: true}
		if isStalled(i) {
			o.Client = slowHTTP
		}
		c, _, err := wstest.Dial(t, base, o, e.client)
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
