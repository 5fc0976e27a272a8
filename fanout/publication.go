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
var ImmediateFreshness = json.RawMessage(`{"mode":"immediate"}`)
