package fanout

import (
	"sync"
	"sync/atomic"
)

// memStream is one channel's stream in a MemoryBroker: its epoch, top
// offset and a ring of its latest publications.
type memStream struct {
	mu      sync.Mutex
	epoch   string
	top     uint64
	ring    []Publication // oldest at ring[head] once full
	head    int
	evicted bool // removed from the broker; a holder must look it up again

	// lastActive is the unix-nano time of the last publication (or of
	// creation); written under mu, read without it by the evictor.
	lastActive atomic.Int64
}

func newMemStream(now int64) *memStream {
	s := &memStream{epoch: newEpoch()}
	s.lastActive.Store(now)
	return s
}

// expireIfIdle starts the stream over with a new epoch when it saw no
// publication for ttl. Caller holds mu.
func (s *memStream) expireIfIdle(now, ttl int64) {
	if now-s.lastActive.Load() <= ttl {
		return
	}
	s.epoch = newEpoch()
	s.top = 0
	s.ring = nil
	s.head = 0
	s.lastActive.Store(now)
}

// append adds p as the newest publication, dropping the oldest beyond size.
// The ring grows by doubling up to exactly size, so idle channels with few
// publications stay small. Caller holds mu.
func (s *memStream) append(p Publication, size int) {
	if len(s.ring) < size {
		if len(s.ring) == cap(s.ring) {
			grown := make([]Publication, len(s.ring), min(max(2*cap(s.ring), 4), size))
			copy(grown, s.ring)
			s.ring = grown
		}
		s.ring = append(s.ring, p)
		return
	}
	s.ring[s.head] = p
	s.head = (s.head + 1) % size
}

// find returns the newest retained publication with message id, scanning
// the ring newest first. Caller holds mu.
func (s *memStream) find(id string) (Publication, bool) {
	n := len(s.ring)
	for i := n - 1; i >= 0; i-- {
		if p := s.ring[(s.head+i)%n]; p.ID == id {
			return p, true
		}
	}
	return Publication{}, false
}

// recover answers a resume request from since. Caller holds mu.
func (s *memStream) recover(since Position, limit int) Recovery {
	top := Position{Offset: s.top, Epoch: s.epoch}
	if since.Epoch != s.epoch || since.Offset > s.top {
		return Recovery{Top: top}
	}
	missing := s.top - since.Offset
	if missing == 0 {
		return Recovery{Top: top, Recovered: true, Publications: []Publication{}}
	}
	if missing > uint64(len(s.ring)) {
		return Recovery{Top: top}
	}
	take := missing
	if limit > 0 && uint64(limit) < take {
		take = uint64(limit)
	}
	out := make([]Publication, 0, take)
	n := len(s.ring)
	for i := n - int(missing); i < n-int(missing-take); i++ {
		out = append(out, s.ring[(s.head+i)%n])
	}
	return Recovery{Top: top, Recovered: true, Publications: out}
}
