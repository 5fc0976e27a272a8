package session

import (
	"context"
	"testing"
)

// TestConnCtx: a context derived from a connection's context ends when
// the connection's does, and one that ended first leaves nothing
// registered with it.
func TestConnCtx(t *testing.T) {
	c := newConnCtx()
	short, cancelShort := context.WithCancel(c)
	cancelShort()
	if err := short.Err(); err != context.Canceled {
		t.Fatalf("short: %v", err)
	}
	c.mu.Lock()
	left := len(c.after)
	c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d functions still registered after the child ended", left)
	}
	if c.Err() != nil {
		t.Fatal("the parent ended with its child")
	}

	long, cancelLong := context.WithCancel(c)
	defer cancelLong()
	c.cancel()
	<-long.Done()
	if err := long.Err(); err != context.Canceled || c.Err() != context.Canceled {
		t.Fatalf("child: %v, parent: %v", err, c.Err())
	}
	c.cancel() // twice is harmless

	late, cancelLate := context.WithCancel(c)
	defer cancelLate()
	<-late.Done()
}
