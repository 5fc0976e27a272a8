package redisbroker

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
	"github.com/heraldgw/herald/internal/testenv"
)

// replyEater is a TCP proxy on loopback in front of Redis: its dial, set
// as a Config's dialer, routes every connection to a node through a
// proxy for that node, which forwards both ways as is until armed with a
// message id. Then the first request carrying that id as an argument is
// forwarded, Redis's reply to it is swallowed and the connection closed:
// Redis executed the command, but the answer was lost on its way.
type replyEater struct {
	t      *testing.T
	marker atomic.Pointer[[]byte] // RESP bulk string of the armed id, or nil
	eaten  chan struct{}          // one value per reply swallowed

	mu      sync.Mutex
	proxies map[string]net.Listener // by node address
	conns   []net.Conn
	wg      sync.WaitGroup
}

func newReplyEater(t *testing.T) *replyEater {
	e := &replyEater{t: t, eaten: make(chan struct{}, 1), proxies: make(map[string]net.Listener)}
	t.Cleanup(func() {
		e.mu.Lock()
		for _, ln := range e.proxies {
			_ = ln.Close()
		}
		for _, c := range e.conns {
			_ = c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

// arm makes the next request carrying id lose its reply.
func (e *replyEater) arm(id string) {
	m := fmt.Appendf(nil, "$%d\r\n%s\r\n", len(id), id)
	e.marker.Store(&m)
}

// dial connects to addr through its proxy.
func (e *replyEater) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ln, err := e.proxy(addr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", ln.Addr().String())
}

// proxy returns addr's proxy, starting it when missing.
func (e *replyEater) proxy(addr string) (net.Listener, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ln, ok := e.proxies[addr]; ok {
		return ln, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.proxies[addr] = ln
	e.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			e.mu.Lock()
			e.conns = append(e.conns, c, up)
			e.mu.Unlock()
			var eat atomic.Bool
			e.wg.Go(func() { e.requests(c, up, &eat) })
			e.wg.Go(func() { e.replies(up, c, &eat) })
		}
	})
	return ln, nil
}

// requests forwards c's requests to up, noting the armed one.
func (e *replyEater) requests(c, up net.Conn, eat *atomic.Bool) {
	forward(up, c, func(b []byte) bool {
		if m := e.marker.Load(); m != nil && bytes.Contains(b, *m) && e.marker.CompareAndSwap(m, nil) {
			eat.Store(true)
		}
		return true
	})
}

// replies forwards up's replies to c, until one answers the armed request.
func (e *replyEater) replies(up, c net.Conn, eat *atomic.Bool) {
	forward(c, up, func([]byte) bool {
		if eat.Load() {
			_ = up.Close()
			e.eaten <- struct{}{}
			return false
		}
		return true
	})
}

// forward copies what src reads to dst while pass, handed each read,
// lets it through; then, or once either side fails, it closes dst.
func forward(dst, src net.Conn, pass func(b []byte) bool) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil || !pass(buf[:n]) {
			return
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// lossyBroker is a Broker whose connections go through a replyEater,
// with a publish whose first reply is lost (go-redis retries it on a new
// connection).
func lossyBroker(t *testing.T, cfg Config) (fanout.Broker, func(*testing.T, fanout.Message) fanout.Publication) {
	e := newReplyEater(t)
	cfg.dialer = e.dial
	b := newTestRedisBroker(t, cfg)
	return b, func(t *testing.T, m fanout.Message) fanout.Publication {
		t.Helper()
		e.arm(m.ID)
		p := fanouttest.MustPublish(t, b, m)
		select {
		case <-e.eaten:
		default:
			t.Fatalf("publish of %s answered %v without losing its reply", m.ID, p.Position)
		}
		return p
	}
}

func TestRedisBrokerIdempotent(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	fanouttest.RunIdempotent(t, func(t *testing.T, historySize int) fanout.Broker {
		return newTestRedisBroker(t, Config{URL: url, KeyPrefix: prefix, HistorySize: historySize})
	}, func(t *testing.T) (fanout.Broker, func(*testing.T, fanout.Message) fanout.Publication) {
		return lossyBroker(t, Config{URL: url, KeyPrefix: prefix})
	})
}

// TestRedisClusterIdempotent runs the idempotence cases on one cluster,
// with a key prefix per case; the lost reply comes from the primary that
// owns the channel.
func TestRedisClusterIdempotent(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t)
	cfg := func(historySize int) Config {
		return Config{URL: "redis://" + c.Addrs[0], Cluster: true, HistorySize: historySize,
			KeyPrefix: "herald_t_" + testenv.Suffix() + ":"}
	}
	fanouttest.RunIdempotent(t, func(t *testing.T, historySize int) fanout.Broker {
		return newTestRedisBroker(t, cfg(historySize))
	}, func(t *testing.T) (fanout.Broker, func(*testing.T, fanout.Message) fanout.Publication) {
		return lossyBroker(t, cfg(0))
	})
}
