package ws

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
)

// TestPutHeader: the header of an unmasked final text frame, in each of
// the three length encodings.
func TestPutHeader(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 127, 0xffff, 0x10000, 70000} {
		room := make([]byte, headRoom)
		l := putHeader(room, n)
		h := room[headRoom-l:]
		if h[0] != 0x81 {
			t.Fatalf("n %d: first byte %#x, want FIN and text", n, h[0])
		}
		var got uint64
		switch h[1] {
		case 126:
			got = uint64(binary.BigEndian.Uint16(h[2:]))
		case 127:
			got = binary.BigEndian.Uint64(h[2:])
		default:
			got = uint64(h[1])
		}
		if h[1]&0x80 != 0 || got != uint64(n) || (n < 126) != (l == 2) || (n > 0xffff) != (l == 10) {
			t.Fatalf("n %d: header % x announces %d", n, h, got)
		}
	}
}

// textFrame is a whole server message of n bytes of c.
func textFrame(c byte, n int) []byte {
	b := append(make([]byte, headRoom), bytes.Repeat([]byte{c}, n)...)
	return b[headRoom-putHeader(b[:headRoom], n):]
}

// TestWriteGateRestGoesFirst: direct writes go out whole while the socket
// takes them; one it takes in part leaves its rest in the gate, no direct
// write goes out while a rest waits, and a frame of the library's (a
// pong, from its reader) follows the rest: the client reads every frame
// whole and in order.
func TestWriteGateRestGoesFirst(t *testing.T) {
	server, client := testenv.TCPPair(t, 4096)
	g := newWriteGate(server, server)
	if g.try == nil {
		t.Fatal("no descriptor for a TCP connection")
	}
	var want, read bytes.Buffer
	partial := false
	for i := 0; !partial; i++ {
		if i > 100000 {
			t.Fatal("no direct write went out in part")
		}
		f := textFrame('a'+byte(i%26), 3000)
		n, err := g.tryWrite(f)
		switch {
		case err != nil:
			t.Fatal(err)
		case n == 0:
			// Full: the writer would send it. Here the client reads a
			// little, and the frame is tried again.
			if _, err := io.CopyN(&read, client, 100); err != nil {
				t.Fatal(err)
			}
			i--
			continue
		case n < len(f):
			partial = true
		}
		want.Write(f)
	}
	if !g.rest.Pending() {
		t.Fatal("a direct write that went out in part kept no rest")
	}
	if n, err := g.tryWrite(textFrame('x', 10)); n != 0 || err != nil {
		t.Fatalf("a direct write while a rest waits: %d, %v", n, err)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(client)
		got <- b
	}()
	pong := []byte{0x8a, 0x02, 'h', 'i'}
	if _, err := g.Write(pong); err != nil {
		t.Fatal(err)
	}
	want.Write(pong)
	// Once the rest is out, direct writes go again: whole, or (should
	// the client not have read enough yet) not at all, as the writer's.
	y := textFrame('y', 10)
	if n, err := g.tryWrite(y); err != nil || (n != 0 && n != len(y)) {
		t.Fatalf("a direct write after the rest: %d of %d, %v", n, len(y), err)
	} else if n == 0 {
		if _, err := g.Write(y); err != nil {
			t.Fatal(err)
		}
	}
	want.Write(y)
	_ = server.Close()
	read.Write(<-got)
	if !bytes.Equal(read.Bytes(), want.Bytes()) {
		t.Fatalf("the client read %d bytes, want %d: not the frames whole and in order", read.Len(), want.Len())
	}
}
