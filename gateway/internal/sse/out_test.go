package sse

import (
	"bytes"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
)

// TestChunkOutKeepsANearDeadline: a deadline asked for at most slack after
// the one set is not set again; a later one, the zero time and any after
// an abort are.
func TestChunkOutKeepsANearDeadline(t *testing.T) {
	server, client := net.Pipe()
	defer server.Close()
	defer client.Close()
	o := newChunkOut(server, 16*time.Second) // slack 1s
	base := time.Now().Add(time.Hour)
	steps := []struct {
		t    time.Time
		sets bool
	}{
		{base, true},
		{base.Add(500 * time.Millisecond), false},
		{base.Add(time.Second), false},
		{base.Add(1500 * time.Millisecond), true},
		{base, true}, // earlier than the one set
		{time.Time{}, true},
		{base, true},
	}
	for i, s := range steps {
		before := o.set.Load()
		if err := o.SetDeadline(s.t); err != nil {
			t.Fatal(err)
		}
		if set := o.set.Load() != before || s.t.IsZero(); set != s.sets {
			t.Fatalf("step %d: set %v, want %v", i, set, s.sets)
		}
	}
	o.Abort()
	if o.set.Load() != 0 {
		t.Fatal("abort left a deadline recorded")
	}
	before := o.set.Load()
	_ = o.SetDeadline(base)
	if o.set.Load() == before {
		t.Fatal("the deadline was not set again after an abort")
	}
}

// event returns a sink buffer (Room free bytes, then the event) of n bytes
// of c.
func event(c byte, n int) []byte {
	return append(make([]byte, Room), bytes.Repeat([]byte{c}, n)...)
}

// TestChunkOutTryWrite: a non-blocking write sends whole chunks while the
// socket takes them; once it is full, it keeps the rest of the chunk it
// was writing, never waits, and the next write (or flush) sends that
// rest first: the client reads every chunk whole and in order.
func TestChunkOutTryWrite(t *testing.T) {
	server, client := testenv.TCPPair(t, 4096)
	o := newChunkOut(server, 10*time.Second)
	if o.try == nil {
		t.Fatal("no descriptor for a TCP connection")
	}
	var want bytes.Buffer
	sent, i := true, 0
	for ; sent; i++ {
		if i > 100000 {
			t.Fatal("the socket never filled")
		}
		ev := event('a'+byte(i%26), 1000)
		want.Write(frame(slices.Clone(ev)))
		var err error
		if sent, err = o.TryWrite(ev); err != nil {
			t.Fatal(err)
		}
	}
	if !o.rest.Pending() {
		t.Fatal("a refused write kept nothing")
	}
	// The client reads everything while the writer sends the rest, then
	// one more chunk, blocking as the writer does.
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(client)
		got <- b
	}()
	if err := o.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := o.Flush(); err != nil {
		t.Fatal(err)
	}
	last := event('z', 10)
	want.Write(frame(slices.Clone(last)))
	if err := o.Write(last); err != nil {
		t.Fatal(err)
	}
	// Once the rest is out, a non-blocking write goes out again, whole
	// or (should the client not have read enough yet) kept for the next
	// flush.
	if sent, err := o.TryWrite(event('y', 10)); err != nil {
		t.Fatal(err)
	} else if !sent {
		if err := o.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	want.Write(frame(event('y', 10)))
	o.Finish(true)
	want.Write(lastChunk)
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("the client read %d bytes, want %d (%d chunks): not the chunks in order", len(b), want.Len(), i+2)
	}
}

// TestChunkOutTryWriteAfterDeadline: a deadline of a batch long written
// that has passed does not refuse a non-blocking write.
func TestChunkOutTryWriteAfterDeadline(t *testing.T) {
	server, client := testenv.TCPPair(t, 4096)
	o := newChunkOut(server, 10*time.Second)
	if err := o.SetDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if sent, err := o.TryWrite(event('a', 10)); !sent || err != nil {
		t.Fatalf("sent %v, %v; want sent", sent, err)
	}
	buf := make([]byte, 64)
	n, err := client.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], frame(event('a', 10))) {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
}

// TestChunkOutTryWriteClosed: a write to a connection the client reset
// fails.
func TestChunkOutTryWriteClosed(t *testing.T) {
	server, _ := testenv.TCPPair(t, 4096)
	o := newChunkOut(server, 10*time.Second)
	_ = server.Close()
	if _, err := o.TryWrite(event('a', 10)); err == nil {
		t.Fatal("a write to a closed connection did not fail")
	}
}
