package ws_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/internal/testenv"
)

func connectFrame(e *testEnv, id uint64) []byte {
	return wstest.TextFrame(fmt.Sprintf(`{"id":%d,"op":"connect","token":%q}`, id, e.wsToken("u1", []string{"orders/*"}, nil)))
}

// TestWSFramesWithUpgrade: frames a client sends in the same write as its
// upgrade request reach net/http's read buffer before the connection is
// hijacked; they are handled, in order, all the same.
func TestWSFramesWithUpgrade(t *testing.T) {
	e := newEnv(t, envOptions{})
	first := append(connectFrame(e, 1), wstest.TextFrame(`{"id":2,"op":"ping"}`)...)
	first = append(first, wstest.MaskedFrame(wstest.OpcodePing, true, []byte("early"))...)
	c := wstest.DialRaw(t, e.addr, first)
	c.AwaitReplies([]uint64{1, 2}, []string{"early"})
	c.Send(wstest.TextFrame(`{"id":3,"op":"subscribe","channel":"orders/1"}`))
	c.AwaitReplies([]uint64{3}, nil)
}

// TestWSFramesSentTogether: frames sent in one write are all handled at
// once, whatever their sizes, also when the server reads the last of them
// into its read buffer together with the end of the one before and the
// connection then has nothing more to read.
func TestWSFramesSentTogether(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := wstest.DialRaw(t, e.addr, connectFrame(e, 1))
	c.AwaitReplies([]uint64{1}, nil)
	id := uint64(1)
	for pad := range 48 {
		// A pong (no reply), then a WebSocket ping.
		pong := wstest.TextFrame(`{"op":"pong"` + strings.Repeat(" ", pad) + `}`)
		tag := fmt.Sprintf("p%d", pad)
		c.Send(append(pong, wstest.MaskedFrame(wstest.OpcodePing, true, []byte(tag))...))
		c.AwaitReplies(nil, []string{tag})

		// A pong, then a request.
		id++
		req := wstest.TextFrame(fmt.Sprintf(`{"id":%d,"op":"ping"}`, id))
		c.Send(append(pong, req...))
		c.AwaitReplies([]uint64{id}, nil)

		// Two requests.
		id += 2
		two := append(wstest.TextFrame(fmt.Sprintf(`{"id":%d,"op":"ping","pad":%q}`, id-1, strings.Repeat("y", pad))),
			wstest.TextFrame(fmt.Sprintf(`{"id":%d,"op":"ping"}`, id))...)
		c.Send(two)
		c.AwaitReplies([]uint64{id - 1, id}, nil)
	}
}

// TestWSLargeMessageAfterIdle: a message of MaxMessageSize bytes in
// several frames, a ping interleaved, is read through the small read
// buffer and answered by a reader that sat idle through garbage
// collections (which shrink stacks mostly unused).
func TestWSLargeMessageAfterIdle(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := wstest.DialRaw(t, e.addr, connectFrame(e, 1))
	c.AwaitReplies([]uint64{1}, nil)
	runtime.GC()
	runtime.GC()

	msg := []byte(`{"id":2,"op":"ping","pad":"`)
	msg = append(msg, strings.Repeat("z", ws.DefaultMaxMessageSize-len(msg)-2)...)
	msg = append(msg, '"', '}')
	var b []byte
	b = append(b, wstest.MaskedFrame(wstest.OpcodeText, false, msg[:100])...)
	b = append(b, wstest.MaskedFrame(wstest.OpcodePing, true, []byte("mid"))...)
	b = append(b, wstest.MaskedFrame(wstest.OpcodeContinuation, false, msg[100:40000])...)
	b = append(b, wstest.MaskedFrame(wstest.OpcodeContinuation, true, msg[40000:])...)
	c.Send(b)
	c.AwaitReplies([]uint64{2}, []string{"mid"})

	// The same in one frame, written in pieces.
	msg[6] = '3'
	b = wstest.MaskedFrame(wstest.OpcodeText, true, msg)
	for len(b) > 0 {
		n := min(len(b), 7000)
		c.Send(b[:n])
		b = b[n:]
	}
	c.AwaitReplies([]uint64{3}, nil)
}

// TestWSOversizeFrameHeader: a frame header announcing more than
// MaxMessageSize closes the connection with message_too_big (4503) at
// once, before any of the payload arrives (which never does): the reader
// does not wait for it until the client timeout (the guard of awaitClose
// is shorter than the 60s default). The same for a
// continuation frame that takes its message over the bound.
func TestWSOversizeFrameHeader(t *testing.T) {
	const max = 2048
	cases := map[string]func(*wstest.Raw) []byte{
		"one frame":     func(*wstest.Raw) []byte { return wstest.FrameHeader(wstest.OpcodeText, true, max+1) },
		"64-bit length": func(*wstest.Raw) []byte { return wstest.FrameHeader(wstest.OpcodeText, true, 1<<62) },
		"continuation": func(c *wstest.Raw) []byte {
			first := wstest.MaskedFrame(wstest.OpcodeText, false, make([]byte, max/2))
			return append(first, wstest.FrameHeader(wstest.OpcodeContinuation, true, max/2+1)...)
		},
		"after a request": func(c *wstest.Raw) []byte {
			return append(wstest.TextFrame(`{"id":2,"op":"ping"}`), wstest.FrameHeader(wstest.OpcodeText, true, max+1)...)
		},
	}
	for name, header := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, envOptions{bounds: session.Bounds{MaxMessageSize: max}})
			c := wstest.DialRaw(t, e.addr, connectFrame(e, 1))
			c.AwaitReplies([]uint64{1}, nil)
			c.Send(header(c))
			if code := c.AwaitClose(false); code != session.CloseMessageTooBig {
				t.Fatalf("close code %d, want %d", code, session.CloseMessageTooBig)
			}
			if d := c.DisconnectPush(); d.Ctl.Reason != session.ReasonMessageTooBig.Code {
				t.Fatalf("disconnect %s", d.Raw)
			}
			if n := testenv.MetricValue(t, e.limits.WithLabelValues(session.LimitMessageSize)); n != 1 {
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
	e := newEnv(t, envOptions{bounds: session.Bounds{MaxMessageSize: max}})
	c := wstest.DialRaw(t, e.addr, connectFrame(e, 1))
	c.AwaitReplies([]uint64{1}, nil)
	msg := []byte(`{"id":2,"op":"ping","pad":"`)
	for len(msg) < max-2 {
		msg = append(msg, 'p')
	}
	msg = append(msg, '"', '}')
	b := wstest.MaskedFrame(wstest.OpcodeText, false, msg[:1000])
	b = append(b, wstest.MaskedFrame(wstest.OpcodePing, true, []byte("mid"))...)
	b = append(b, wstest.MaskedFrame(wstest.OpcodeContinuation, true, msg[1000:])...)
	msg[6] = '3'
	b = append(b, wstest.MaskedFrame(wstest.OpcodeText, true, msg)...)
	for len(b) > 0 {
		n := min(len(b), 5)
		c.Send(b[:n])
		b = b[n:]
	}
	c.AwaitReplies([]uint64{2, 3}, []string{"mid"})
}
