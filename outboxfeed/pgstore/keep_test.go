package pgstore

import (
	"bytes"
	"testing"
)

// TestKeepGrowsItsBlocks: a claim of a few records copies them into one
// small block, a long one into blocks that double up to slabBytes, and
// every copy is its own (appending to one never touches the next).
func TestKeepGrowsItsBlocks(t *testing.T) {
	tg := newPGClaimRowTargets()
	payload := bytes.Repeat([]byte("p"), 200)
	a := tg.keep(payload)
	b := tg.keep(payload)
	if got := cap(tg.slab); got != firstSlabBytes {
		t.Fatalf("a claim of two 200-byte payloads took a block of %d bytes, want %d", got, firstSlabBytes)
	}
	_ = append(a, 'x')
	if !bytes.Equal(b, payload) || !bytes.Equal(a, payload) {
		t.Fatal("appending to one copy changed another")
	}

	var caps []int
	for range 2000 {
		before := cap(tg.slab)
		if got := tg.keep(payload); !bytes.Equal(got, payload) {
			t.Fatalf("copy %q, want the payload", got)
		}
		if c := cap(tg.slab); c != before {
			caps = append(caps, c)
		}
	}
	want := []int{2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10}
	if len(caps) < len(want) {
		t.Fatalf("blocks %v, want them to grow as %v and stay at %d", caps, want, slabBytes)
	}
	for i, c := range caps {
		w := slabBytes
		if i < len(want) {
			w = want[i]
		}
		if c != w {
			t.Fatalf("blocks %v, want them to grow as %v and stay at %d", caps, want, slabBytes)
		}
	}

	big := bytes.Repeat([]byte("b"), slabBytes/4+1)
	before := cap(tg.slab)
	if got := tg.keep(big); !bytes.Equal(got, big) || cap(tg.slab) != before {
		t.Fatal("a payload above a quarter of a block was not copied on its own")
	}
	if tg.keep(nil) != nil {
		t.Fatal("an empty column kept memory")
	}
}
