package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// handshakeWait is how long coder/websocket's Close waits for the peer's
// close frame (close.go). A connection released sooner than that after it
// was closed did not wait for a peer that is gone.
const handshakeWait = 5 * time.Second

// These tests drive a whole server: what they check is that a connection
// closed for the client timeout gives back, at once, what the server holds
// for it (its slot, its registration, its metrics) as well as its
// goroutines. The frame watch and the rest of the transport are tested in
// internal/ws.

func connectFrame(e *testEnv, id uint64) []byte {
	return wstest.TextFrame(fmt.Sprintf(`{"id":%d,"op":"connect","token":%q}`, id, e.wsToken("u1", []string{"orders/*"}, nil)))
}

// TestWSTimeoutReleasesAtOnce: a connection whose peer stopped (it neither
// reads nor writes, nor answers the close frame) is released as soon as it
// is closed for the client timeout — its slot, its metrics and its
// goroutines — not after coder/websocket's wait for a close frame that
// never comes. The peer's socket stays open all along: the server drops
// the TCP connection itself, right after its close frame.
func TestWSTimeoutReleasesAtOnce(t *testing.T) {
	// The connection is looked up between its connect reply and the client
	// timeout: 2 s leave a busy machine room for that.
	e := newEnv(t, envOptions{cfg: Config{HeartbeatInterval: 500 * time.Millisecond, ClientTimeout: 2 * time.Second}})
	c := wstest.DialRaw(t, e.srv.Addr(), connectFrame(e, 1))
	c.AwaitReplies([]uint64{1}, nil)
	conns := e.srv.connList(nil)
	if len(conns) != 1 {
		t.Fatalf("%d connections", len(conns))
	}
	conn := conns[0]
	// The peer stops here: nothing more is read or written until the
	// server has let the connection go.
	<-conn.Done() // the client timeout
	if r := conn.Reason(); r.Code != session.ReasonTimeout.Code {
		t.Fatalf("closed for %s", r.Code)
	}
	eventually(t, handshakeWait/2, "the timed-out connection to be released", func() bool {
		readers, writers := wsGoroutines()
		return len(e.srv.connList(nil)) == 0 && e.srv.slots.Load() == 0 && readers == 0 && writers == 0 &&
			gaugeValue(e.srv.metrics.connections.WithLabelValues(transportWS)) == 0
	})
	if code := c.AwaitClose(true); code != session.CloseTimeout {
		t.Fatalf("close code %d, want %d", code, session.CloseTimeout)
	}
	if d := c.DisconnectPush(); d.Ctl.Reason != session.ReasonTimeout.Code {
		t.Fatalf("disconnect %s", d.Raw)
	}
}

// wsWriting reports whether a message write is under way: a goroutine
// writes a message under its write deadline.
func wsWriting() bool { return stackCount("internal/ws.(*frameSink).write(") > 0 }

// TestWSTimeoutReleasesBlockedWriter: a peer that stopped reading (and
// sending) while publications flowed leaves the writer blocked on a full
// socket; closed for the client timeout, the connection is released at
// once, not when the blocked write reaches WriteTimeout (an hour here:
// publishing may take minutes on a busy machine, and the writer blocks on
// the first megabytes).
func TestWSTimeoutReleasesBlockedWriter(t *testing.T) {
	e := newEnv(t, envOptions{history: 500, cfg: Config{
		HeartbeatInterval: 5 * time.Second, ClientTimeout: 10 * time.Second, WriteTimeout: time.Hour,
	}})
	c := wstest.DialRaw(t, e.srv.Addr(), append(connectFrame(e, 1), wstest.TextFrame(`{"id":2,"op":"subscribe","channel":"orders/1"}`)...))
	c.AwaitReplies([]uint64{1, 2}, nil)
	conns := e.srv.connList(nil)
	if len(conns) != 1 {
		t.Fatalf("%d connections", len(conns))
	}
	conn := conns[0]
	// The peer stops reading here. 400 publications of 64 KB are more
	// than the socket buffers of both ends hold. Until the writer blocks,
	// the peer sends a pong at each step: the client timeout does not end
	// the connection while a busy machine is still publishing. Then the
	// peer stops sending too.
	pong := wstest.TextFrame(`{"op":"pong"}`)
	data := `"` + strings.Repeat("x", 64<<10) + `"`
	for range 400 {
		c.Send(pong)
		e.publish("acme", "orders/1", data)
	}
	eventually(t, time.Minute, "the writer to block on the stopped peer", func() bool {
		c.Send(pong)
		return wsWriting()
	})
	<-conn.Done() // the client timeout
	if r := conn.Reason(); r.Code != session.ReasonTimeout.Code {
		t.Fatalf("closed for %s", r.Code)
	}
	eventually(t, 20*time.Second, "the timed-out connection to be released", func() bool {
		readers, writers := wsGoroutines()
		return len(e.srv.connList(nil)) == 0 && e.srv.slots.Load() == 0 && readers == 0 && writers == 0
	})
}
