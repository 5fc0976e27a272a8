package gateway

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// WebSocket opcodes a raw test client sends or expects.
const (
	wsOpContinuation = 0x0
	wsOpText         = 0x1
	wsOpPing         = 0x9
	wsOpPong         = 0xA
)

// rawWS is a WebSocket client written by hand, so a test decides exactly
// which bytes reach the server in one write.
type rawWS struct {
	t      *testing.T
	conn   net.Conn
	br     *bufio.Reader
	frames []wstest.Frame // herald frames of a message not returned yet
	pongs  []string       // payloads of the pongs received
}

// dialRaw sends the upgrade request followed by extra in one write and
// reads the 101.
func dialRaw(t *testing.T, e *testEnv, extra []byte) *rawWS {
	t.Helper()
	conn, err := net.DialTimeout("tcp", e.srv.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	req := "GET /v1/ws HTTP/1.1\r\nHost: " + e.srv.Addr() + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
		"Sec-WebSocket-Protocol: " + ws.Protocol + "\r\n\r\n"
	if _, err := conn.Write(append([]byte(req), extra...)); err != nil {
		t.Fatal(err)
	}
	c := &rawWS{t: t, conn: conn, br: bufio.NewReader(conn)}
	c.deadline()
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %s", resp.Status)
	}
	return c
}

// deadline bounds the next reads: a frame the server never answers fails
// the test instead of hanging it.
func (c *rawWS) deadline() {
	if err := c.conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		c.t.Fatal(err)
	}
}

// maskedFrame encodes one masked client frame.
func maskedFrame(op byte, fin bool, payload []byte) []byte {
	b := []byte{op}
	if fin {
		b[0] |= 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	b = append(b, key[:]...)
	for i, x := range payload {
		b = append(b, x^key[i%4])
	}
	return b
}

// textFrame encodes a client text message of one frame.
func textFrame(s string) []byte { return maskedFrame(wsOpText, true, []byte(s)) }

// send writes b in one write.
func (c *rawWS) send(b []byte) {
	c.t.Helper()
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// read reads one server frame: a text message's herald frames are queued,
// a pong's payload is noted.
func (c *rawWS) read() {
	c.t.Helper()
	c.deadline()
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		c.t.Fatalf("reading a frame: %v", err)
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var ext [2]byte
		if _, err := io.ReadFull(c.br, ext[:]); err != nil {
			c.t.Fatal(err)
		}
		n = uint64(binary.BigEndian.Uint16(ext[:]))
	case 127:
		var ext [8]byte
		if _, err := io.ReadFull(c.br, ext[:]); err != nil {
			c.t.Fatal(err)
		}
		n = binary.BigEndian.Uint64(ext[:])
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(c.br, payload); err != nil {
		c.t.Fatal(err)
	}
	switch op := h[0] & 0x0f; {
	case op == wsOpPong:
		c.pongs = append(c.pongs, string(payload))
	case op == wsOpText && h[0]&0x80 != 0:
		for line := range bytes.SplitSeq(payload, []byte{'\n'}) {
			c.frames = append(c.frames, wstest.ParseFrame(c.t, line))
		}
	default:
		c.t.Fatalf("unexpected server frame: opcode %#x, fin %v, %q", op, h[0]&0x80 != 0, payload)
	}
}

// awaitReplies reads until a successful reply to each of ids and a pong
// for each of pongs arrived, in any order.
func (c *rawWS) awaitReplies(ids []uint64, pongs []string) {
	c.t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[fmt.Sprintf("reply %d", id)] = true
	}
	for _, p := range pongs {
		want["pong "+p] = true
	}
	for len(want) > 0 {
		c.read()
		for _, f := range c.frames {
			if f.Push != "" || f.Error != nil {
				c.t.Fatalf("unexpected frame %s", f.Raw)
			}
			delete(want, fmt.Sprintf("reply %d", f.ID))
		}
		for _, p := range c.pongs {
			delete(want, "pong "+p)
		}
		c.frames, c.pongs = c.frames[:0], c.pongs[:0]
	}
}

func connectFrame(e *testEnv, id uint64) []byte {
	return textFrame(fmt.Sprintf(`{"id":%d,"op":"connect","token":%q}`, id, e.wsToken("u1", []string{"orders/*"}, nil)))
}

// TestWSFramesWithUpgrade: frames a client sends in the same write as its
// upgrade request reach net/http's read buffer before the connection is
// hijacked; they are handled, in order, all the same.
func TestWSFramesWithUpgrade(t *testing.T) {
	e := newEnv(t, envOptions{})
	first := append(connectFrame(e, 1), textFrame(`{"id":2,"op":"ping"}`)...)
	first = append(first, maskedFrame(wsOpPing, true, []byte("early"))...)
	c := dialRaw(t, e, first)
	c.awaitReplies([]uint64{1, 2}, []string{"early"})
	c.send(textFrame(`{"id":3,"op":"subscribe","channel":"orders/1"}`))
	c.awaitReplies([]uint64{3}, nil)
}

// TestWSFramesSentTogether: frames sent in one write are all handled at
// once, whatever their sizes, also when the server reads the last of them
// into its read buffer together with the end of the one before and the
// connection then has nothing more to read.
func TestWSFramesSentTogether(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := dialRaw(t, e, connectFrame(e, 1))
	c.awaitReplies([]uint64{1}, nil)
	id := uint64(1)
	for pad := range 48 {
		// A pong (no reply), then a WebSocket ping.
		pong := textFrame(`{"op":"pong"` + strings.Repeat(" ", pad) + `}`)
		tag := fmt.Sprintf("p%d", pad)
		c.send(append(pong, maskedFrame(wsOpPing, true, []byte(tag))...))
		c.awaitReplies(nil, []string{tag})

		// A pong, then a request.
		id++
		req := textFrame(fmt.Sprintf(`{"id":%d,"op":"ping"}`, id))
		c.send(append(pong, req...))
		c.awaitReplies([]uint64{id}, nil)

		// Two requests.
		id += 2
		two := append(textFrame(fmt.Sprintf(`{"id":%d,"op":"ping","pad":%q}`, id-1, strings.Repeat("y", pad))),
			textFrame(fmt.Sprintf(`{"id":%d,"op":"ping"}`, id))...)
		c.send(two)
		c.awaitReplies([]uint64{id - 1, id}, nil)
	}
}

// TestWSLargeMessageAfterIdle: a message of MaxMessageSize bytes in
// several frames, a ping interleaved, is read through the small read
// buffer and answered by a reader that sat idle through garbage
// collections (which shrink stacks mostly unused).
func TestWSLargeMessageAfterIdle(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := dialRaw(t, e, connectFrame(e, 1))
	c.awaitReplies([]uint64{1}, nil)
	runtime.GC()
	runtime.GC()

	msg := []byte(`{"id":2,"op":"ping","pad":"`)
	msg = append(msg, strings.Repeat("z", DefaultMaxMessageSize-len(msg)-2)...)
	msg = append(msg, '"', '}')
	var b []byte
	b = append(b, maskedFrame(wsOpText, false, msg[:100])...)
	b = append(b, maskedFrame(wsOpPing, true, []byte("mid"))...)
	b = append(b, maskedFrame(wsOpContinuation, false, msg[100:40000])...)
	b = append(b, maskedFrame(wsOpContinuation, true, msg[40000:])...)
	c.send(b)
	c.awaitReplies([]uint64{2}, []string{"mid"})

	// The same in one frame, written in pieces.
	msg[6] = '3'
	b = maskedFrame(wsOpText, true, msg)
	for len(b) > 0 {
		n := min(len(b), 7000)
		c.send(b[:n])
		b = b[n:]
	}
	c.awaitReplies([]uint64{3}, nil)
}
