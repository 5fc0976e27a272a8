package wstest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldgw/herald/gateway/internal/ws"
)

// WebSocket opcodes a raw test client sends or expects.
const (
	OpcodeContinuation = 0x0
	OpcodeText         = 0x1
	OpcodePing         = 0x9
	OpcodePong         = 0xA
)

// Raw is a WebSocket client written by hand, so a test decides exactly
// which bytes reach the server in one write.
type Raw struct {
	t      testing.TB
	conn   net.Conn
	br     *bufio.Reader
	Frames []Frame  // herald frames of a message not returned yet
	pongs  []string // payloads of the pongs received
}

// DialRaw opens a WebSocket to addr by hand: it sends the upgrade
// request (path /v1/ws, subprotocol herald.v1) followed by extra in one
// write and reads the 101. The connection is closed when t ends.
func DialRaw(t testing.TB, addr string, extra []byte) *Raw {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	req := "GET /v1/ws HTTP/1.1\r\nHost: " + addr + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
		"Sec-WebSocket-Protocol: " + ws.Protocol + "\r\n\r\n"
	if _, err := conn.Write(append([]byte(req), extra...)); err != nil {
		t.Fatal(err)
	}
	c := &Raw{t: t, conn: conn, br: bufio.NewReader(conn)}
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
func (c *Raw) deadline() {
	if err := c.conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		c.t.Fatal(err)
	}
}

// MaskedFrame encodes one masked client frame.
func MaskedFrame(op byte, fin bool, payload []byte) []byte {
	b := FrameHeader(op, fin, uint64(len(payload)))
	key := b[len(b)-4:]
	for i, x := range payload {
		b = append(b, x^key[i%4])
	}
	return b
}

// TextFrame encodes a client text message of one frame.
func TextFrame(s string) []byte { return MaskedFrame(OpcodeText, true, []byte(s)) }

// Send writes b in one write.
func (c *Raw) Send(b []byte) {
	c.t.Helper()
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// Read reads one server frame: a text message's herald frames are queued,
// a pong's payload is noted.
func (c *Raw) Read() {
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
	case op == OpcodePong:
		c.pongs = append(c.pongs, string(payload))
	case op == OpcodeText && h[0]&0x80 != 0:
		for line := range bytes.SplitSeq(payload, []byte{'\n'}) {
			c.Frames = append(c.Frames, ParseFrame(c.t, line))
		}
	default:
		c.t.Fatalf("unexpected server frame: opcode %#x, fin %v, %q", op, h[0]&0x80 != 0, payload)
	}
}

// AwaitReplies reads until a successful reply to each of ids and a pong
// for each of pongs arrived, in any order; server pings are skipped, as
// Client.NextFrame skips them.
func (c *Raw) AwaitReplies(ids []uint64, pongs []string) {
	c.t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[fmt.Sprintf("reply %d", id)] = true
	}
	for _, p := range pongs {
		want["pong "+p] = true
	}
	for len(want) > 0 {
		c.Read()
		for _, f := range c.Frames {
			if f.Push == "ping" {
				continue
			}
			if f.Push != "" || f.Error != nil {
				c.t.Fatalf("unexpected frame %s", f.Raw)
			}
			delete(want, fmt.Sprintf("reply %d", f.ID))
		}
		for _, p := range c.pongs {
			delete(want, "pong "+p)
		}
		c.Frames, c.pongs = c.Frames[:0], c.pongs[:0]
	}
}

// FrameHeader encodes a masked client frame header announcing n payload
// bytes; no payload follows.
func FrameHeader(op byte, fin bool, n uint64) []byte {
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

// AwaitClose reads server frames until the close frame and returns its
// code; the herald frames read on the way are in c.Frames. With dropped,
// it then reads on until the server drops the connection.
func (c *Raw) AwaitClose(dropped bool) websocket.StatusCode {
	c.t.Helper()
	for {
		c.deadline()
		h, err := c.br.Peek(2)
		if err != nil {
			c.t.Fatalf("reading a frame: %v", err)
		}
		if h[0]&0x0f != 0x8 {
			c.Read()
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

// DisconnectPush returns the disconnect push among the frames read.
func (c *Raw) DisconnectPush() Frame {
	c.t.Helper()
	for _, f := range c.Frames {
		if f.Push == "disconnect" {
			return f
		}
	}
	c.t.Fatalf("no disconnect push in %v", c.Frames)
	return Frame{}
}
