package ws_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/internal/testenv"
)

// TestWSMessageTooBig: a message over MaxMessageSize closes with
// message_too_big (4503); one at the bound is fine — for a small bound and
// for the default, which is above coder/websocket's own 32 KiB read limit.
func TestWSMessageTooBig(t *testing.T) {
	for _, max := range []int{2048, ws.DefaultMaxMessageSize} {
		t.Run(strconv.Itoa(max), func(t *testing.T) {
			b := session.Bounds{MaxMessageSize: max}
			if max == ws.DefaultMaxMessageSize {
				b.MaxMessageSize = 0 // the default
			}
			e := newEnv(t, envOptions{bounds: b})
			c := e.connected("orders/*")
			frame := func(size int) []byte {
				b := []byte(`{"id":1,"op":"ping","pad":"`)
				b = append(b, strings.Repeat("x", size-len(b)-2)...)
				return append(b, '"', '}')
			}
			c.SendFrame(frame(max))
			c.OK(1, nil)
			c.SendFrame(frame(max + 1))
			d := c.ClosedWith("message_too_big", session.CloseMessageTooBig)
			if d.Reconnect || !strings.Contains(d.Message, strconv.Itoa(max)) {
				t.Fatalf("disconnect %+v", d)
			}
			if n := testenv.MetricValue(t, e.limits.WithLabelValues(session.LimitMessageSize)); n != 1 {
				t.Fatalf("herald_limit_rejections_total{message_size} = %v", n)
			}
			// A much larger one (many frames' worth) is cut off the same way.
			c = e.connected("orders/*")
			c.SendFrame(frame(1 << 20))
			c.ClosedWith("message_too_big", session.CloseMessageTooBig)
			e.connected("orders/*").Subscribe("orders/1", nil)
		})
	}
}

// TestWSClientTimeout: a client that answers no ping is closed with
// timeout (4005); one that answers stays, through many client timeouts.
// The pong timeout (ClientTimeout − HeartbeatInterval) is long enough for
// a client on a busy machine to answer.
func TestWSClientTimeout(t *testing.T) {
	const heartbeat, timeout = 100 * time.Millisecond, 2 * time.Second
	e := newEnv(t, envOptions{bounds: session.Bounds{HeartbeatInterval: heartbeat, ClientTimeout: timeout}})
	silent := e.connected("orders/*")
	live := e.dialWS(wstest.DialOpts{})
	res := live.Connect(e.wsToken("u1", []string{"orders/*"}, nil))
	if res.PingIntervalMS != heartbeat.Milliseconds() || res.PongTimeoutMS != (timeout-heartbeat).Milliseconds() {
		t.Fatalf("connect result %+v", res)
	}
	// The live client answers every ping with a pong.
	done := make(chan struct{})
	var pongs atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case f, ok := <-live.Frames():
				if !ok {
					return
				}
				if f.Push == "ping" {
					pongs.Add(1)
					_ = live.Conn.Write(context.Background(), websocket.MessageText, []byte(`{"op":"pong"}`))
				}
			case <-done:
				return
			}
		}
	})
	d := silent.ClosedWith("timeout", session.CloseTimeout)
	if !d.Reconnect {
		t.Fatalf("disconnect %+v", d)
	}
	// Pings answered over more than one client timeout after the silent
	// client was closed: the live one was kept because it answered.
	after := pongs.Load()
	eventually(t, time.Minute, "the live client to answer pings for longer than the client timeout", func() bool {
		return pongs.Load() >= after+int64(timeout/heartbeat)+5
	})
	close(done)
	wg.Wait()
	live.OK(live.Request(ws.OpPing, nil), nil)
	if n := testenv.MetricValue(t, e.limits.WithLabelValues(session.LimitClientTimeout)); n != 1 {
		t.Fatalf("herald_limit_rejections_total{client_timeout} = %v", n)
	}
}

// TestWSClientTimeoutCountsUnreadFrames: a client whose frames wait in
// the socket while the server's reader is held up (here in a connect the
// test holds, as a busy machine would hold it) is not closed for the
// client timeout: what it sent counts as received, however late the
// server reads it. Once read, it is served; silent from then on, it is
// closed for the timeout.
func TestWSClientTimeoutCountsUnreadFrames(t *testing.T) {
	const timeout = 200 * time.Millisecond
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e := newEnv(t, envOptions{
		bounds: session.Bounds{ClientTimeout: timeout, ConnectTimeout: time.Hour},
		connect: func() {
			once.Do(func() {
				close(entered)
				<-release
			})
		},
	})
	c := wstest.DialRaw(t, e.addr, connectFrame(e, 1))
	<-entered // the reader read the connect frame and waits in it
	c.Send(wstest.TextFrame(`{"op":"pong"}`))
	// A silent client accepted after the pong was sent is closed for the
	// timeout: the held connection's timeout has passed as well.
	e.dialWS(wstest.DialOpts{}).ClosedWith("timeout", session.CloseTimeout)
	close(release)
	c.AwaitReplies([]uint64{1}, nil)
	if code := c.AwaitClose(true); code != session.CloseTimeout {
		t.Fatalf("close code %d, want %d", code, session.CloseTimeout)
	}
	if n := testenv.MetricValue(t, e.limits.WithLabelValues(session.LimitClientTimeout)); n != 2 {
		t.Fatalf("herald_limit_rejections_total{client_timeout} = %v, want 2", n)
	}
}

// TestWSConnectTimeout: no connect frame within ConnectTimeout closes
// with timeout (4005).
func TestWSConnectTimeout(t *testing.T) {
	e := newEnv(t, envOptions{bounds: session.Bounds{ConnectTimeout: 200 * time.Millisecond}})
	c := e.dialWS(wstest.DialOpts{})
	d := c.ClosedWith("timeout", session.CloseTimeout)
	if !strings.Contains(d.Message, "connect") {
		t.Fatalf("disconnect %+v", d)
	}
	if n := testenv.MetricValue(t, e.limits.WithLabelValues(session.LimitConnectTimeout)); n != 1 {
		t.Fatalf("herald_limit_rejections_total{connect_timeout} = %v", n)
	}
	e.connected("orders/*").Subscribe("orders/1", nil)
}
