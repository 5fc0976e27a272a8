package fanout

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"
)

// memStream is one channel's stream in a MemoryBroker: its epoch, top
// offset and a ring of its latest publications.
type memStream struct {
	mu      sync.Mutex
	key     Key
	epoch   string
	top     uint64
	ring    memRing
	ids     map[string]uint64 // message id → offset of every retained publication
	evicted bool              // removed from the broker; a holder must look it up again

	// lastActive is the unix-nano time of the last publication (or of
	// creation); written under mu, read without it by the evictor.
	lastActive atomic.Int64
}

func newMemStream(key Key, now int64) *memStream {
	s := &memStream{key: key, epoch: NewEpoch()}
	s.lastActive.Store(now)
	return s
}

// expireIfIdle starts the stream over with a new epoch when it saw no
// publication for ttl, and reports whether it did. Caller holds mu.
func (s *memStream) expireIfIdle(now, ttl int64) bool {
	if now-s.lastActive.Load() <= ttl {
		return false
	}
	s.epoch = NewEpoch()
	s.top = 0
	s.ring = memRing{}
	s.ids = nil
	s.lastActive.Store(now)
	return true
}

// append adds p (of this stream's key and epoch) as the newest
// publication, dropping the oldest beyond size, and indexes its id.
// Caller holds mu.
func (s *memStream) append(p *Publication, size int) {
	if s.ids == nil {
		s.ids = make(map[string]uint64)
	}
	if s.ring.n == size {
		if old := s.ring.at(0); s.ids[old.ID] == old.Offset {
			delete(s.ids, old.ID)
		}
	}
	s.ring.push(memEntry{ID: p.ID, Type: p.Type, SchemaVersion: p.SchemaVersion, Time: p.Time,
		Freshness: p.Freshness, Data: p.Data, Offset: p.Offset}, size)
	s.ids[p.ID] = p.Offset
}

// pub is the publication e holds. Caller holds mu.
func (s *memStream) pub(e *memEntry) Publication {
	return Publication{
		Message: Message{ID: e.ID, Key: s.key, Type: e.Type, SchemaVersion: e.SchemaVersion, Time: e.Time,
			Freshness: e.Freshness, Data: e.Data},
		Position: Position{Offset: e.Offset, Epoch: s.epoch},
	}
}

// find returns the retained publication with message id (there is at most
// one: Publish appends no id that is retained). Caller holds mu.
func (s *memStream) find(id string) (Publication, bool) {
	off, ok := s.ids[id]
	if !ok || off > s.top || s.top-off >= uint64(s.ring.n) {
		return Publication{}, false
	}
	e := s.ring.at(s.ring.n - 1 - int(s.top-off))
	if e.ID != id {
		return Publication{}, false
	}
	return s.pub(e), true
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
	if missing > uint64(s.ring.n) {
		return Recovery{Top: top}
	}
	take := missing
	if limit > 0 && uint64(limit) < take {
		take = uint64(limit)
	}
	out := make([]Publication, 0, take)
	n := s.ring.n
	for i := n - int(missing); i < n-int(missing-take); i++ {
		out = append(out, s.pub(s.ring.at(i)))
	}
	return Recovery{Top: top, Recovered: true, Publications: out}
}

// memChunk is how many publications one chunk of a memRing holds.
const memChunk = 64

// memEntry is a publication as a memRing holds it: without what every
// publication of its stream shares (key and epoch, see memStream.pub) or
// none keeps (the fence), so that the history is smaller to hold, copy
// and scan for the garbage collector.
type memEntry struct {
	ID            string
	Type          string
	SchemaVersion int
	Time          time.Time
	Freshness     json.RawMessage
	Data          json.RawMessage
	Offset        uint64
}

// memRing holds a stream's latest publications in chunks of memChunk, so
// that growing it never copies what it holds, except while the first
// chunk grows fourfold (4, 16, 64: an idle channel with few publications
// stays small, and a busy one's first chunk is copied twice, not four
// times). Once it holds size publications it overwrites the oldest.
type memRing struct {
	chunks [][]memEntry
	n      int // publications held
	head   int // the oldest, once full
}

// push adds p as the newest publication, dropping the oldest beyond size.
func (r *memRing) push(p memEntry, size int) {
	if r.n == size {
		*r.slot(r.head) = p
		r.head = (r.head + 1) % size
		return
	}
	c, off := r.n/memChunk, r.n%memChunk
	want := min(memChunk, size-c*memChunk) // the chunk's final capacity
	switch {
	case c == len(r.chunks) && c == 0:
		r.chunks = append(r.chunks, make([]memEntry, 0, min(4, want)))
	case c == len(r.chunks):
		r.chunks = append(r.chunks, make([]memEntry, 0, want))
	case off == cap(r.chunks[c]):
		grown := make([]memEntry, off, min(4*off, want))
		copy(grown, r.chunks[c])
		r.chunks[c] = grown
	}
	r.chunks[c] = append(r.chunks[c], p)
	r.n++
}

// at is the i-th publication held, oldest first (0 ≤ i < n).
func (r *memRing) at(i int) *memEntry {
	return r.slot((r.head + i) % r.n)
}

// slot is the storage of the j-th publication in insertion order.
func (r *memRing) slot(j int) *memEntry { return &r.chunks[j/memChunk][j%memChunk] }
