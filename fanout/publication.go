package fanout

import (
	"encoding/json"
	"time"
)

// Key names one channel inside one tenant. The same channel name in two
// tenants is two keys; there is no way to build a key that crosses tenants.
type Key struct {
	Tenant  string
	Channel string
}

// String is "tenant/channel": unambiguous, because a tenant is one segment.
func (k Key) String() string { return k.Tenant + "/" + k.Channel }

// Message is what a producer hands to a broker: a publication without its
// position.
type Message struct {
	ID            string // message id, the outbox id end to end
	Key           Key
	Type          string
	SchemaVersion int
	Time          time.Time
	Freshness     json.RawMessage // nil means {"mode":"immediate"}
	Data          json.RawMessage // any JSON value, delivered unchanged

	// Fence, when Fence.Scope is set, fences this publication (see Fence).
	// It is an instruction to the broker, not part of the history: every
	// Publication a broker returns or hands out has a zero Fence.
	Fence Fence
}

// Fence is the outbox partition lease a publication was made under. It
// keeps a Worker that lost its lease (paused past it, then resumed) from
// adding a second history entry for a message its successor published:
//
//   - A publication whose Value is below the newest Value the broker
//     accepted for its Scope is refused with ErrStaleFence; nothing is
//     appended or fanned out. An equal or higher Value is accepted and
//     becomes the newest.
//   - As every publication, one whose message ID is still in the
//     channel's retained history appends and fans out nothing: Publish
//     returns the publication already there (its position and stored
//     message). Takeover adds nothing to that in MemoryBroker; in
//     redisbroker.Broker it also finds the entries written before the channel's
//     ids were indexed (by Herald versions that skipped a retained ID only
//     on a takeover), by scanning the stream.
//
// MemoryBroker tracks the newest Value per Scope. redisbroker.Broker tracks it
// per channel and Scope, in the channel's meta hash, so the check stays in
// one Cluster slot; with Takeover that gives the same guarantee: a stale
// holder's publication on a channel the new holder already published to
// is refused, and one that reaches a channel first is skipped as a
// duplicate by the new holder's takeover batch. There the newest Value
// lives as long as the channel's history (HistoryTTL after its last
// publication).
//
// The zero Fence leaves a publication unfenced; a Fence with a Value or
// Takeover but no Scope is an invalid message.
type Fence struct {
	Scope    string // the lease's scope: e.g. "p3" (outbox partition); "" = unfenced
	Value    int64  // the lease's fencing value; grows with every takeover
	Takeover bool   // re-publishes what an earlier holder may have published: also scan for an ID in entries older than the ids index
}

// Position is where a publication sits in its channel's stream. Offsets
// start at 1 and grow by one per publication; the epoch changes whenever the
// stream's history is lost or reset, making older offsets meaningless.
type Position struct {
	Offset uint64
	Epoch  string
}

// Publication is a message at its position in the channel's stream.
type Publication struct {
	Message
	Position
}

// ImmediateFreshness is the freshness a message without one carries.
var ImmediateFreshness = json.RawMessage(immediateFreshness)

// immediateFreshness is ImmediateFreshness compacted. NewPublication
// gives every publication with it the same immediateFreshnessBytes
// instead of a copy: a publication's bytes are read-only wherever it goes
// (its Data is the history's own), and an append to these reallocates.
const immediateFreshness = `{"mode":"immediate"}`

var immediateFreshnessBytes = json.RawMessage(immediateFreshness)[:len(immediateFreshness):len(immediateFreshness)]
