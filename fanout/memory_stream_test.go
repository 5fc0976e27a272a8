package fanout

import (
	"strconv"
	"testing"
)

// TestMemRing checks that a memRing holds the latest size publications in
// order, across chunk boundaries and once it wraps.
func TestMemRing(t *testing.T) {
	for _, size := range []int{1, 3, 4, 5, memChunk - 1, memChunk, memChunk + 1, 2*memChunk + 7, 1000} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			var r memRing
			var want []string
			for k := range 3*size + 2 {
				id := strconv.Itoa(k)
				r.push(memEntry{ID: id}, size)
				if want = append(want, id); len(want) > size {
					want = want[1:]
				}
				if r.n != len(want) {
					t.Fatalf("after %d pushes: holds %d, want %d", k+1, r.n, len(want))
				}
				for i, id := range want {
					if got := r.at(i).ID; got != id {
						t.Fatalf("after %d pushes: at(%d) = %s, want %s", k+1, i, got, id)
					}
				}
			}
			held := 0
			for _, c := range r.chunks {
				held += cap(c)
			}
			if held != size {
				t.Fatalf("chunks hold %d publications, want exactly %d", held, size)
			}
		})
	}
}
