package gateway

import "github.com/heraldgw/herald/fanout"

// positions tracks, for every channel of one connection, the position of
// the last publication written to it (or where its subscription began). It
// filters out what the client already has, and is the content of the
// stream's cursor. Only the connection's writer touches it.
type positions struct {
	tenant  string
	entries []cursorEntry // in subscription order; the cursor's entries
	index   map[string]int
	names   []string // channel of entries[i]
}

func newPositions(tenant string, capacity int) *positions {
	return &positions{
		tenant:  tenant,
		entries: make([]cursorEntry, 0, capacity),
		index:   make(map[string]int, capacity),
		names:   make([]string, 0, capacity),
	}
}

// add starts tracking channel at pos. It reports false if the channel is
// already tracked.
func (ps *positions) add(channel string, pos fanout.Position) bool {
	if _, ok := ps.index[channel]; ok {
		return false
	}
	ps.index[channel] = len(ps.entries)
	ps.entries = append(ps.entries, cursorEntry{
		hash: channelHash(fanout.Key{Tenant: ps.tenant, Channel: channel}),
		pos:  pos,
	})
	ps.names = append(ps.names, channel)
	return true
}

// remove stops tracking channel.
func (ps *positions) remove(channel string) {
	i, ok := ps.index[channel]
	if !ok {
		return
	}
	delete(ps.index, channel)
	ps.entries = append(ps.entries[:i], ps.entries[i+1:]...)
	ps.names = append(ps.names[:i], ps.names[i+1:]...)
	for j := i; j < len(ps.names); j++ {
		ps.index[ps.names[j]] = j
	}
}

// of returns the position of key's channel, nil when it is not tracked.
func (ps *positions) of(key fanout.Key) *fanout.Position {
	if key.Tenant != ps.tenant {
		return nil
	}
	i, ok := ps.index[key.Channel]
	if !ok {
		return nil
	}
	return &ps.entries[i].pos
}

// admission is what admitNext decided about a publication.
type admission int

const (
	admitRepeat admission = iota // the client has it (or the channel is not tracked): skip it
	admitNext                    // the next one: write it
	admitGap                     // publications before it are missing: read them from the history first
)

// admitNext is admit for the live stream: of the same epoch it takes only
// the publication right after the channel's position, so a publication
// the connection missed (dropped from its full queue, lost in transit) is
// found by the next one of its channel and read from the history. A new
// epoch is taken at any offset, as admit does.
func (ps *positions) admitNext(key fanout.Key, pos fanout.Position) admission {
	cur := ps.of(key)
	if cur == nil {
		return admitRepeat
	}
	if pos.Epoch == cur.Epoch {
		switch {
		case pos.Offset <= cur.Offset:
			return admitRepeat
		case pos.Offset > cur.Offset+1:
			return admitGap
		}
	}
	*cur = pos
	return admitNext
}

// admit reports whether the publication of key at pos should be written:
// its channel is tracked and it is newer than what the client has (a later
// offset in the same epoch, or any offset in a new epoch). An admitted
// publication advances the channel's position.
func (ps *positions) admit(key fanout.Key, pos fanout.Position) bool {
	cur := ps.of(key)
	if cur == nil || pos.Epoch == cur.Epoch && pos.Offset <= cur.Offset {
		return false
	}
	*cur = pos
	return true
}
