package sse

import (
	"net"
	"testing"
	"time"
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
