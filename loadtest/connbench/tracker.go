package main

import (
	"sync/atomic"
	"time"
)

// maxTracked bounds the publications a subscriber tracks (a bitmap of 2^24
// is 2 MiB): far more than a bounded run publishes.
const maxTracked = 1 << 24

// subscriber is what one connection received. Its reader goroutine alone
// writes it while the run goes on; got and done may be read at any time,
// everything else once the reader has returned.
//
// Each publication is tracked by one bit. With the WebSocket publish op the
// publisher learns every offset, so the bit is the offset's (offset
// start.Offset+1 is bit 0). With the outbox the broker assigns offsets the
// publisher never sees, so the bit is the publisher's sequence number k,
// carried in the payload: the subscriber's channel has k = channel,
// channel+bySeq, channel+2·bySeq, …, tracked as bit k/bySeq. Either way
// offsets must still rise: the order check is on offsets.
type subscriber struct {
	idx     int
	channel int
	stalled bool     // reads only once publishing ends (-stall)
	start   position // where the subscription began
	bySeq   uint64   // > 0: track by sequence number (outbox), over this many channels

	seen   []uint64 // one bit per publication, as above
	last   uint64   // highest offset arrived
	dups   int64    // publications that arrived again
	ooo    int64    // offsets that arrived after (or equal to) a higher one
	stale  int64    // offsets at or before the start, or another channel's sequence numbers (never expected)
	beyond int64    // publications past maxTracked (not checked)
	unsub  int64    // unsubscribed pushes
	reason string   // why the server ended the connection; "" = it did not
	early  []early  // outbox: deliveries read before their COMMIT time was known

	got  atomic.Int64 // distinct publications after the start
	done atomic.Bool  // the reader has returned
}

// early is a delivery whose COMMIT time was not yet recorded when it was
// read; the latency is settled once the run ends (commitLog.settle).
type early struct {
	seq  uint64
	recv int64 // Unix ns
}

// bit returns the bit tracking the publication key names (an offset, or a
// sequence number with bySeq), and whether this subscriber can expect it.
func (s *subscriber) bit(key uint64) (uint64, bool) {
	if s.bySeq > 0 {
		if key%s.bySeq != uint64(s.channel) {
			return 0, false
		}
		return key / s.bySeq, true
	}
	if key <= s.start.Offset {
		return 0, false
	}
	return key - s.start.Offset - 1, true
}

// deliver accounts one publication received at recv. It reports whether
// the publication was new to this subscriber (not a repeat, not
// unexpected).
func (s *subscriber) deliver(p pubInfo, recv time.Time, lat *histogram) bool {
	if p.offset <= s.start.Offset {
		s.stale++
		return false
	}
	key := p.offset
	if s.bySeq > 0 {
		key = p.seq
	}
	i, ok := s.bit(key)
	if !ok {
		s.stale++
		return false
	}
	if i >= maxTracked {
		s.beyond++
		return false
	}
	word, bit := i/64, uint64(1)<<(i%64)
	for uint64(len(s.seen)) <= word {
		s.seen = append(s.seen, 0)
	}
	if s.seen[word]&bit != 0 {
		s.dups++
		return false
	}
	s.seen[word] |= bit
	s.got.Add(1)
	if !s.stalled {
		// A stalled subscriber's latency is how long it chose not to
		// read: not the server's.
		lat.record(recv.Sub(time.Unix(0, p.sent)))
	}
	// Offsets start above start.Offset ≥ 0, so last = 0 means none yet.
	// Tracked by offset, an equal offset is a repeat (caught above).
	if p.offset <= s.last {
		s.ooo++
	} else {
		s.last = p.offset
	}
	return true
}

// has reports whether the publication key names (an offset, or a sequence
// number with bySeq) arrived.
func (s *subscriber) has(key uint64) bool {
	i, ok := s.bit(key)
	if !ok || i >= maxTracked {
		return false
	}
	word := i / 64
	return word < uint64(len(s.seen)) && s.seen[word]&(uint64(1)<<(i%64)) != 0
}

// finish records why the connection ended and marks the reader done.
func (s *subscriber) finish(reason string) {
	s.reason = reason
	s.done.Store(true)
}
