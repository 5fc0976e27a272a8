package gateway

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// handshakeWait is how long coder/websocket's Close waits for the peer's
// close frame (close.go). A connection released sooner than that after it
// was closed did not wait for a peer that is gone.
const handshakeWait = 5 * time.Second

// frameHeader encodes a masked client frame header announcing n payload
// bytes; no payload follows.
func frameHeader(op byte, fin bool, n uint64) []byte {
	b := []byte{op}
	if fin {
		b[0] |= 0x80
	}
	switch {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, n)
	}
	return append(b, 0x37, 0xfa, 0x21, 0x3d) // the mask key
}

// awaitClose reads server frames until the close frame and returns its
// code; the herald frames read on the way are in c.frames. With dropped,
// it then reads on until the server drops the connection.
func (c *rawWS) awaitClose(dropped bool) websocket.StatusCode {
	c.t.Helper()
	for {
		c.deadline()
		h, err := c.br.Peek(2)
		if err != nil {
			c.t.Fatalf("reading a frame: %v", err)
		}
		if h[0]&0x0f != 0x8 {
			c.read()
			continue
		}
		n := int(h[1] & 0x7f) // a control frame: at most 125 bytes
		b := make([]byte, 2+n)
		if _, err := io.ReadFull(c.br, b); err != nil {
			c.t.Fatal(err)
		}
		if n < 2 {
			c.t.Fatalf("close frame without a code: %q", b)
		}
		code := websocket.StatusCode(binary.BigEndian.Uint16(b[2:4]))
		if !dropped {
			return code
		}
		if rest, err := io.ReadAll(c.br); len(rest) > 0 || isTimeout(err) {
			c.t.Fatalf("after the close frame: %q, %v (want the connection dropped)", rest, err)
		}
		return code
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// disconnectPush returns the disconnect push among the frames read.
func (c *rawWS) disconnectPush() wstest.Frame {
	c.t.Helper()
	for _, f := range c.frames {
		if f.Push == "disconnect" {
			return f
		}
	}
	c.t.Fatalf("no disconnect push in %v", c.frames)
	return wstest.Frame{}
}

// TestWSOversizeFrameHeader: a frame header announcing more than
// MaxMessageSize closes the connection with message_too_big (4503) at
// once, before any of the payload arrives (which never does): the reader
// does not wait for it until the client timeout (the guard of awaitClose
// is shorter than the 60s default). The same for a
// continuation frame that takes its message over the bound.
func TestWSOversizeFrameHeader(t *testing.T) {
	const max = 2048
	cases := map[string]func(*rawWS) []byte{
		"one frame":     func(*rawWS) []byte { return frameHeader(wsOpText, true, max+1) },
		"64-bit length": func(*rawWS) []byte { return frameHeader(wsOpText, true, 1<<62) },
		"continuation": func(c *rawWS) []byte {
			first := maskedFrame(wsOpText, false, make([]byte, max/2))
			return append(first, frameHeader(wsOpContinuation, true, max/2+1)...)
		},
		"after a request": func(c *rawWS) []byte {
			return append(textFrame(`{"id":2,"op":"ping"}`), frameHeader(wsOpText, true, max+1)...)
		},
	}
	for name, header := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, envOptions{cfg: Config{MaxMessageSize: max}})
			c := dialRaw(t, e, connectFrame(e, 1))
			c.awaitReplies([]uint64{1}, nil)
			c.send(header(c))
			if code := c.awaitClose(false); code != session.CloseMessageTooBig {
				t.Fatalf("close code %d, want %d", code, session.CloseMessageTooBig)
			}
			if d := c.disconnectPush(); d.Ctl.Reason != session.ReasonMessageTooBig.Code {
				t.Fatalf("disconnect %s", d.Raw)
			}
			if n := e.counter(e.srv.metrics.limitRejections.WithLabelValues(session.LimitMessageSize)); n != 1 {
				t.Fatalf("herald_limit_rejections_total{message_size} = %v", n)
			}
		})
	}
}

// TestWSFrameWatchAtTheBound: messages of exactly MaxMessageSize, in one
// frame or several with control frames between, pass the frame watch,
// also when written a few bytes at a time.
func TestWSFrameWatchAtTheBound(t *testing.T) {
	const max = 2048
	e := newEnv(t, envOptions{cfg: Config{MaxMessageSize: max}})
	c := dialRaw(t, e, connectFrame(e, 1))
	c.awaitReplies([]uint64{1}, nil)
	msg := []byte(`{"id":2,"op":"ping","pad":"`)
	for len(msg) < max-2 {
		msg = append(msg, 'p')
	}
	msg = append(msg, '"', '}')
	b := maskedFrame(wsOpText, false, msg[:1000])
	b = append(b, maskedFrame(wsOpPing, true, []byte("mid"))...)
	b = append(b, maskedFrame(wsOpContinuation, true, msg[1000:])...)
	msg[6] = '3'
	b = append(b, maskedFrame(wsOpText, true, msg)...)
	for len(b) > 0 {
		n := min(len(b), 5)
		c.send(b[:n])
		b = b[n:]
	}
	c.awaitReplies([]uint64{2, 3}, []string{"mid"})
}

// TestWSTimeoutReleasesAtOnce: a connection whose peer stopped (it neither
// reads nor writes, nor answers the close frame) is released as soon as it
// is closed for the client timeout — its slot, its metrics and its
// goroutines — not after coder/websocket's wait for a close frame that
// never comes. The peer's socket stays open all along: the server drops
// the TCP connection itself, right after its close frame.
func TestWSTimeoutReleasesAtOnce(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{HeartbeatInterval: 50 * time.Millisecond, ClientTimeout: 200 * time.Millisecond}})
	c := dialRaw(t, e, connectFrame(e, 1))
	c.awaitReplies([]uint64{1}, nil)
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
	if code := c.awaitClose(true); code != session.CloseTimeout {
		t.Fatalf("close code %d, want %d", code, session.CloseTimeout)
	}
	if d := c.disconnectPush(); d.Ctl.Reason != session.ReasonTimeout.Code {
		t.Fatalf("disconnect %s", d.Raw)
	}
}

// wsWriting reports whether a message write is under way: a goroutine
// writes a message under its write deadline.
func wsWriting() bool { return stackCount("internal/ws.(*frameSink).write(") > 0 }

// TestWSTimeoutReleasesBlockedWriter: a peer that stopped reading (and
// sending) while publications flowed leaves the writer blocked on a full
// socket; closed for the client timeout, the connection is released at
// once, not when the blocked write reaches WriteTimeout (a minute here).
func TestWSTimeoutReleasesBlockedWriter(t *testing.T) {
	e := newEnv(t, envOptions{history: 500, cfg: Config{
		// Time for the publications to fill the sockets before the client
		// timeout, on a busy machine too.
		HeartbeatInterval: 5 * time.Second, ClientTimeout: 10 * time.Second, WriteTimeout: time.Minute,
	}})
	c := dialRaw(t, e, append(connectFrame(e, 1), textFrame(`{"id":2,"op":"subscribe","channel":"orders/1"}`)...))
	c.awaitReplies([]uint64{1, 2}, nil)
	conns := e.srv.connList(nil)
	if len(conns) != 1 {
		t.Fatalf("%d connections", len(conns))
	}
	conn := conns[0]
	// The peer stops here. 400 publications of 64 KB are more than the
	// socket buffers of both ends hold.
	data := `"` + strings.Repeat("x", 64<<10) + `"`
	for range 400 {
		e.publish("acme", "orders/1", data)
	}
	eventually(t, time.Minute, "the writer to block on the stopped peer", wsWriting)
	<-conn.Done() // the client timeout
	if r := conn.Reason(); r.Code != session.ReasonTimeout.Code {
		t.Fatalf("closed for %s", r.Code)
	}
	eventually(t, 20*time.Second, "the timed-out connection to be released", func() bool {
		readers, writers := wsGoroutines()
		return len(e.srv.connList(nil)) == 0 && e.srv.slots.Load() == 0 && readers == 0 && writers == 0
	})
}
