package pgstore

import (
	"math/rand/v2"
	"testing"

	"github.com/heraldgw/herald/outboxfeed"
)

// A range gathered in chunks is handed out a batch at a time in seq
// order, whether it came sorted (one transaction after another) or not,
// and a batch within one chunk shares the chunk's array.
func TestGatherHandsOutARangeInSeqOrder(t *testing.T) {
	for _, tc := range []struct {
		name         string
		n, limit     int
		shuffle      bool
		shortenFirst int // the first batch completes only this many
	}{
		{"sorted", 2_537, 100, false, 0},
		{"sorted, exact chunks", 300, 100, false, 0},
		{"one record", 1, 100, false, 0},
		{"unsorted", 1_234, 100, true, 0},
		{"shortened batch", 950, 100, false, 37},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := make([]outboxfeed.Record, tc.n)
			for i := range rs {
				rs[i].Seq = int64(i + 1)
			}
			if tc.shuffle {
				rand.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
			}
			g := gather{limit: tc.limit}
			for _, r := range rs {
				g.add(r)
			}
			chunks := g.inSeqOrder()
			b := &outboxfeed.Batch{Driver: &pgBatch{}}
			hand(b, chunks, tc.limit)
			var got []int64
			for batches := 0; ; batches++ {
				if len(b.Records) == 0 || len(b.Records) > tc.limit {
					t.Fatalf("batch %d holds %d records (limit %d)", batches, len(b.Records), tc.limit)
				}
				if !tc.shuffle && tc.shortenFirst == 0 && &b.Records[0] != &chunks[batches][0] {
					t.Fatalf("batch %d was copied; chunks hold exactly a batch", batches)
				}
				done := len(b.Records)
				if batches == 0 && tc.shortenFirst > 0 {
					done = tc.shortenFirst
				}
				for _, r := range b.Records[:done] {
					got = append(got, r.Seq)
				}
				if !b.More && done == len(b.Records) {
					break
				}
				// What readKeep does: the records past a shortened batch,
				// then the rest.
				ranged := state(b).rest
				if done < len(b.Records) {
					ranged = append([][]outboxfeed.Record{b.Records[done:]}, ranged...)
				}
				nb := &outboxfeed.Batch{Driver: &pgBatch{}}
				hand(nb, ranged, tc.limit)
				b = nb
			}
			if len(got) != tc.n {
				t.Fatalf("handed out %d records, want %d", len(got), tc.n)
			}
			for i, s := range got {
				if s != int64(i+1) {
					t.Fatalf("record %d has seq %d, want %d", i, s, i+1)
				}
			}
		})
	}
}
