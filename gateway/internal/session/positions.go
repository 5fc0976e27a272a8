package session

import (
	"hash/fnv"
	"slices"
	"sync/atomic"

	"github.com/heraldgw/herald/fanout"
)

// Positions tracks, for every channel of one connection, the position of
// the last publication written to it (or where its subscription began). It
// filters out what the client already has, and is the content of the
// stream's cursor. Only the connection's writer touches it, except
// Written, which any goroutine may call.
type Positions struct {
	tenant  string
	Entries []CursorEntry // in subscription order; the cursor's entries
	// index finds a channel's entry once there are more than indexFrom;
	// nil while there are fewer, which find looks up in names.
	index map[string]int
	names []string // channel of entries[i]
	// read[i] is the take (below) during which entries[i]'s epoch was
	// read from the history: when its subscription began, or when
	// catching up found the channel's epoch changed.
	read []uint64
	// takes counts the writer's takes of publications from the queue
	// (Took).
	takes uint64
	// offs[i] mirrors entries[i].Pos.Offset for Written; shared is the
	// copy of names and offs that Written reads, replaced (never
	// changed) by Add and Remove.
	offs   []*atomic.Uint64
	shared atomic.Pointer[writtenView]
}

// writtenView is an immutable list of the channels' written offsets.
type writtenView struct {
	names []string
	offs  []*atomic.Uint64
	index map[string]int // only above indexFrom channels
}

// Written returns the offset of the last publication of channel written to
// the connection (or where its subscription began), and false when the
// channel is not tracked. Any goroutine may call it: the hub's side uses
// it to tell a connection that fell behind the history.
func (ps *Positions) Written(channel string) (uint64, bool) {
	v := ps.shared.Load()
	if v == nil {
		return 0, false
	}
	if v.index != nil {
		i, ok := v.index[channel]
		if !ok {
			return 0, false
		}
		return v.offs[i].Load(), true
	}
	for i, n := range v.names {
		if n == channel {
			return v.offs[i].Load(), true
		}
	}
	return 0, false
}

// publish replaces the view Written reads.
func (ps *Positions) publish() {
	v := &writtenView{names: slices.Clone(ps.names), offs: slices.Clone(ps.offs)}
	if len(v.names) > indexFrom {
		v.index = make(map[string]int, len(v.names))
		for i, n := range v.names {
			v.index[n] = i
		}
	}
	ps.shared.Store(v)
}

// indexFrom is the number of channels above which Positions keeps an
// index by name: most connections hold a few channels, which a scan finds
// as fast, and a map would cost each of them a few hundred bytes for its
// lifetime.
const indexFrom = 8

func NewPositions(tenant string, capacity int) *Positions {
	ps := &Positions{
		tenant:  tenant,
		Entries: make([]CursorEntry, 0, capacity),
		names:   make([]string, 0, capacity),
		read:    make([]uint64, 0, capacity),
	}
	if capacity > indexFrom {
		ps.index = make(map[string]int, capacity)
	}
	return ps
}

// find returns the index of channel's entry.
func (ps *Positions) find(channel string) (int, bool) {
	if ps.index != nil {
		i, ok := ps.index[channel]
		return i, ok
	}
	for i, name := range ps.names {
		if name == channel {
			return i, true
		}
	}
	return 0, false
}

// Took counts one take of publications from the queue by the writer
// (one that found the queue empty need not count): those it returned were
// queued before it, those of later takes after it.
func (ps *Positions) Took() { ps.takes++ }

// Add starts tracking channel at pos. It reports false if the channel is
// already tracked.
func (ps *Positions) Add(channel string, pos fanout.Position) bool {
	if _, ok := ps.find(channel); ok {
		return false
	}
	switch {
	case ps.index != nil:
		ps.index[channel] = len(ps.Entries)
	case len(ps.names) == indexFrom:
		ps.index = make(map[string]int, 2*indexFrom)
		for i, name := range ps.names {
			ps.index[name] = i
		}
		ps.index[channel] = len(ps.Entries)
	}
	ps.Entries = append(ps.Entries, CursorEntry{
		Hash: ChannelHash(fanout.Key{Tenant: ps.tenant, Channel: channel}),
		Pos:  pos,
	})
	ps.names = append(ps.names, channel)
	ps.read = append(ps.read, ps.takes)
	off := new(atomic.Uint64)
	off.Store(pos.Offset)
	ps.offs = append(ps.offs, off)
	ps.publish()
	return true
}

// Remove stops tracking channel.
func (ps *Positions) Remove(channel string) {
	i, ok := ps.find(channel)
	if !ok {
		return
	}
	if ps.index != nil {
		delete(ps.index, channel)
	}
	ps.Entries = append(ps.Entries[:i], ps.Entries[i+1:]...)
	ps.names = append(ps.names[:i], ps.names[i+1:]...)
	ps.read = append(ps.read[:i], ps.read[i+1:]...)
	ps.offs = append(ps.offs[:i], ps.offs[i+1:]...)
	for j := i; ps.index != nil && j < len(ps.names); j++ {
		ps.index[ps.names[j]] = j
	}
	ps.publish()
}

// Of returns the position of key's channel, nil when it is not tracked.
func (ps *Positions) Of(key fanout.Key) *fanout.Position {
	i, ok := ps.lookup(key)
	if !ok {
		return nil
	}
	return &ps.Entries[i].Pos
}

// Admission is what admitNext decided about a publication.
type Admission int

const (
	AdmitRepeat Admission = iota // the client has it (or the channel is not tracked): skip it
	AdmitWrite                   // the next one: write it
	AdmitGap                     // publications before it are missing: read them from the history first
)

// AdmitNext is admit for the live stream: it takes only the publication
// right after the channel's position, so a publication the connection
// missed (dropped from its full queue, lost in transit) is found by the
// next one of its channel and read from the history. Of the same epoch
// that is the next offset; of another epoch (the channel's history was
// replaced) the first publication, offset 1, and only when it is sure to
// be of a newer epoch than the position's: it was queued after the
// position's epoch was read from the history (a take after the one
// following that read), as the hub hands a connection each channel's
// publications in order. One queued before may be of an older epoch
// (the channel was evicted between the hub's subscription and the
// history's answer): the history tells, as it tells a later offset of a
// new epoch, whose first publications the connection missed.
func (ps *Positions) AdmitNext(key fanout.Key, pos fanout.Position) Admission {
	i, ok := ps.lookup(key)
	if !ok {
		return AdmitRepeat
	}
	cur := &ps.Entries[i].Pos
	switch {
	case pos.Epoch != cur.Epoch:
		if pos.Offset != 1 || ps.takes <= ps.read[i]+1 {
			return AdmitGap
		}
	case pos.Offset <= cur.Offset:
		return AdmitRepeat
	case pos.Offset > cur.Offset+1:
		return AdmitGap
	}
	*cur = pos
	ps.offs[i].Store(pos.Offset)
	return AdmitWrite
}

// Admit reports whether the publication of key at pos should be written:
// its channel is tracked and it is newer than what the client has (a later
// offset in the same epoch, or any offset in a new epoch). An admitted
// publication advances the channel's position. It is for publications
// read from the history, which follow the position without a gap: the
// next ones of its epoch, or a new epoch's from its first (resync).
func (ps *Positions) Admit(key fanout.Key, pos fanout.Position) bool {
	i, ok := ps.lookup(key)
	if !ok {
		return false
	}
	cur := &ps.Entries[i].Pos
	switch {
	case pos.Epoch != cur.Epoch:
		ps.read[i] = ps.takes
	case pos.Offset <= cur.Offset:
		return false
	}
	*cur = pos
	ps.offs[i].Store(pos.Offset)
	return true
}

// lookup returns the index of key's channel.
func (ps *Positions) lookup(key fanout.Key) (int, bool) {
	if key.Tenant != ps.tenant {
		return 0, false
	}
	return ps.find(key.Channel)
}

// CursorEntry is one channel's position in a cursor.
type CursorEntry struct {
	Hash uint32
	Pos  fanout.Position
}

// ChannelHash identifies a channel inside a cursor.
func ChannelHash(key fanout.Key) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key.Tenant))
	_, _ = h.Write([]byte{'/'})
	_, _ = h.Write([]byte(key.Channel))
	return h.Sum32()
}
