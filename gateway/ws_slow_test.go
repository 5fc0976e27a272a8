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
)

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

// TestWSSlowSubscribers: among 200 subscribers of one channel, the 10 that
// stop reading are disconnected as slow while the other 190 receive every
// publication in order; the heap stays bounded while the stalled clients
// sit there.
func TestWSSlowSubscribers(t *testing.T) {
	const (
		total    = 200
		stalled  = 10
		burst    = 4
		payload  = 1 << 10
		after    = 100 // publications after the stalled clients were cut off
		maxBytes = 32 << 10
		maxMsgs  = 8
	)
	e := newEnv(t, envOptions{history: 64, cfg: Config{
		QueueMaxBytes: maxBytes, QueueMaxMessages: maxMsgs, ConnectAttemptsPerIP: -1,
		HeartbeatInterval: time.Hour, ClientTimeout: 2 * time.Hour, MaxConnectionsPerUser: -1,
	}})
	ts := smallBufferServer(t, e)
	base := "ws://" + ts.Listener.Addr().String()
	tok := e.wsToken("u1", []string{"orders/*"}, nil)
	slowHTTP := smallRecvClient(t)

	clients := make([]*wsClient, total)
	for i := range clients {
		o := dialOpts{fast: true}
		if i%(total/stalled) == 0 {
			o.client = slowHTTP
		}
		c, _, err := dialWSURL(t, base, o, e.client)
		if err != nil {
			t.Fatal(err)
		}
		c.connect(tok)
		c.subscribe("orders/1", nil)
		clients[i] = c
	}

	// Healthy clients check every publication as it arrives.
	var healthy []*wsClient
	last := make([]atomic.Uint64, total)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i, c := range clients {
		if i%(total/stalled) == 0 {
			c.stall()
			continue
		}
		healthy = append(healthy, c)
		wg.Go(func() {
			for {
				select {
				case f, ok := <-c.frames:
					if !ok {
						t.Errorf("healthy client %d was disconnected: %v", i, c.err)
						return
					}
					if f.Push != "pub" {
						continue
					}
					if want := last[i].Load() + 1; f.Pub.Offset != want {
						t.Errorf("healthy client %d: offset %d, want %d", i, f.Pub.Offset, want)
						return
					}
					last[i].Store(f.Pub.Offset)
				case <-stop:
					return
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	if len(healthy) != total-stalled {
		t.Fatalf("%d healthy clients", len(healthy))
	}

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
				if i%(total/stalled) != 0 && last[i].Load() < published {
					return false
				}
			}
			return true
		})
	}
	publishBurst()
	heapBefore := heapInUse()

	slow := e.srv.metrics.limitRejections.WithLabelValues(limitQueue)
	for e.counter(slow) < stalled {
		if published > 5000 {
			t.Fatalf("only %v of %d stalled clients were closed as slow after %d publications", e.counter(slow), stalled, published)
		}
		publishBurst()
	}
	cutOff := published
	heapStalled := heapInUse()
	for published < cutOff+after {
		publishBurst()
	}
	heapAfter := heapInUse()
	eventually(t, 10*time.Second, "10 slow disconnects", func() bool {
		return e.counter(e.srv.metrics.disconnects.WithLabelValues("ws", "slow")) == stalled
	})
	if n := e.counter(e.srv.metrics.connections.WithLabelValues("ws")); n != total-stalled {
		t.Fatalf("herald_connections{ws} = %v, want %d", n, total-stalled)
	}

	// Bound: each stalled connection may hold its queue (QueueMaxBytes), a
	// batch buffer being written (wsBatchBytes) and the frames its client
	// had read before stalling; everything else is shared. Allow that for
	// all ten plus 4 MiB for the test's own bookkeeping and GC noise.
	bound := uint64(stalled*(maxBytes+wsBatchBytes+256<<10) + 4<<20)
	grow := func(h uint64) int64 { return int64(h) - int64(heapBefore) }
	t.Logf("stalled clients cut off after %d publications of %d B; heap before %d KiB, "+
		"when cut off %+d KiB, after %d more publications %+d KiB (bound %d KiB)",
		cutOff, payload, heapBefore>>10, grow(heapStalled)>>10, after, grow(heapAfter)>>10, bound>>10)
	for _, h := range []uint64{heapStalled, heapAfter} {
		if grow(h) > int64(bound) {
			t.Fatalf("heap grew by %d KiB, bound %d KiB", grow(h)>>10, bound>>10)
		}
	}
}

// TestWSWriteTimeout: a client that stops reading while its queue has room
// is closed with write_timeout once a write misses WriteTimeout.
func TestWSWriteTimeout(t *testing.T) {
	e := newEnv(t, envOptions{history: 10, cfg: Config{
		WriteTimeout: 200 * time.Millisecond, QueueMaxBytes: 64 << 20, QueueMaxMessages: 100000,
	}})
	ts := smallBufferServer(t, e)
	c, _, err := dialWSURL(t, "ws://"+ts.Listener.Addr().String(), dialOpts{client: smallRecvClient(t)}, e.client)
	if err != nil {
		t.Fatal(err)
	}
	c.connect(e.wsToken("u1", []string{"orders/*"}, nil))
	c.subscribe("orders/1", nil)
	c.stall()
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
