package main

import (
	"sync/atomic"
	"time"
)

// maxTracked bounds the offsets a subscriber tracks past its start (a
// bitmap of 2^24 offsets is 2 MiB): far more than a bounded run publishes.
const maxTracked = 1 << 24

// subscriber is what one connection received. Its reader goroutine alone
// writes it while the run goes on; got and done may be read at any time,
// everything else once the reader has returned.
type subscriber struct {
	idx     int
	channel int
	stalled bool     // reads only once publishing ends (-stall)
	start   position // where the subscription began

	seen   []uint64 // bit i: offset start.Offset+1+i arrived
	last   uint64   // highest offset arrived
	dups   int64    // offsets that arrived again
	ooo    int64    // offsets that arrived after a higher one
	stale  int64    // offsets at or before the start (never expected)
	beyond int64    // offsets past maxTracked (not checked)
	unsub  int64    // unsubscribed pushes
	reason string   // why the server ended the connection; "" = it did not

	got  atomic.Int64 // distinct offsets after the start
	done atomic.Bool  // the reader has returned
}

// deliver accounts one publication received at recv.
func (s *subscriber) deliver(offset uint64, sent int64, recv time.Time, lat *histogram) {
	if offset <= s.start.Offset {
		s.stale++
		return
	}
	i := offset - s.start.Offset - 1
	if i >= maxTracked {
		s.beyond++
		return
	}
	word, bit := i/64, uint64(1)<<(i%64)
	for uint64(len(s.seen)) <= word {
		s.seen = append(s.seen, 0)
	}
	if s.seen[word]&bit != 0 {
		s.dups++
		return
	}
	s.seen[word] |= bit
	s.got.Add(1)
	if !s.stalled {
		// A stalled subscriber's latency is how long it chose not to
		// read: not the server's.
		lat.record(recv.Sub(time.Unix(0, sent)))
	}
	if offset < s.last {
		s.ooo++
	} else {
		s.last = offset
	}
}

// has reports whether offset arrived.
func (s *subscriber) has(offset uint64) bool {
	if offset <= s.start.Offset || offset-s.start.Offset-1 >= maxTracked {
		return false
	}
	i := offset - s.start.Offset - 1
	word := i / 64
	return word < uint64(len(s.seen)) && s.seen[word]&(uint64(1)<<(i%64)) != 0
}

// finish records why the connection ended and marks the reader done.
func (s *subscriber) finish(reason string) {
	s.reason = reason
	s.done.Store(true)
}
