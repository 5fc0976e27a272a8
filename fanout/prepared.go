package fanout

import (
	"strconv"

	"github.com/heraldgw/herald/internal/envelope"
	"github.com/heraldgw/herald/internal/jsonstr"
	"github.com/heraldgw/herald/internal/timefmt"
)

// EnvelopeTimeLayout is the envelope's time: RFC 3339 in UTC with exactly
// nine fractional digits, so every "time" has the same length and sorts
// as text (time.RFC3339Nano would drop trailing zeros).
const EnvelopeTimeLayout = timefmt.Layout

// Prepared is a publication together with its publication envelope (docs/protocol.md), encoded
// once and shared read-only by every subscriber it is delivered to.
//
// The envelope is one compact JSON object with no newline inside, its
// fields in this order: id, channel, offset, epoch, type, schema_version,
// time (RFC 3339 with nanoseconds, UTC), freshness ({"mode":"immediate"}
// when the message has none), data. The tenant is not in the envelope: a
// connection lives inside one tenant.
type Prepared struct {
	pub  Publication
	json []byte
}

// NewPrepared encodes p's envelope. Data and Freshness are compacted; a
// Data or Freshness that is not valid JSON (brokers refuse such messages at
// Publish, so only a hand-built Publication can carry one) is encoded as
// null rather than producing an envelope that is not JSON.
func NewPrepared(p Publication) *Prepared {
	return &Prepared{pub: p, json: appendEnvelope(make([]byte, 0, envelopeSizeHint(&p)), &p)}
}

// JSON returns the envelope. The bytes are shared by every holder of the
// Prepared and must not be modified.
func (p *Prepared) JSON() []byte { return p.json }

// Size is len(JSON()), for queues bounded in bytes.
func (p *Prepared) Size() int { return len(p.json) }

// Key is the publication's channel key.
func (p *Prepared) Key() Key { return p.pub.Key }

// Position is the publication's offset and epoch.
func (p *Prepared) Position() Position { return p.pub.Position }

// Publication returns the publication. Its Data and Freshness share memory
// with the Prepared and must not be modified.
func (p *Prepared) Publication() Publication { return p.pub }

// envelopeSizeHint is an upper estimate of the encoded size for one
// allocation in the common case (strings without escapes).
func envelopeSizeHint(p *Publication) int {
	n := 160 + len(p.ID) + len(p.Key.Channel) + len(p.Epoch) + len(p.Type) + len(p.Data)
	if p.Freshness == nil {
		return n + len(ImmediateFreshness)
	}
	return n + len(p.Freshness)
}

// appendEnvelope appends the whole envelope of p.
func appendEnvelope(b []byte, p *Publication) []byte {
	b = appendEnvelopeHead(b, p)
	b = strconv.AppendUint(b, p.Offset, 10)
	b = append(b, `,"epoch":`...)
	b = jsonstr.Append(b, p.Epoch)
	b = append(b, ',')
	return appendEnvelopeTail(b, p)
}

// appendEnvelopeHead appends the envelope up to the offset's value:
// {"id":…,"channel":…,"offset":
func appendEnvelopeHead(b []byte, p *Publication) []byte {
	b = append(b, `{"id":`...)
	b = jsonstr.Append(b, p.ID)
	b = append(b, `,"channel":`...)
	b = jsonstr.Append(b, p.Key.Channel)
	return append(b, `,"offset":`...)
}

// appendEnvelopeTail appends the envelope after the epoch and its comma:
// "type":…,"schema_version":…,"time":…,"freshness":…,"data":…}
func appendEnvelopeTail(b []byte, p *Publication) []byte {
	b = envelope.AppendTyped(b, p.Type, p.SchemaVersion, p.Time)
	if p.Freshness == nil {
		b = append(b, ImmediateFreshness...)
	} else {
		b = appendCompactOrNull(b, p.Freshness)
	}
	b = append(b, `,"data":`...)
	b = appendCompactOrNull(b, p.Data)
	return append(b, '}')
}

// EnvelopeParts encodes p's envelope without its position, for a Broker
// that learns the position only where it stores the publication (the Redis
// publish script): head runs up to the offset's value
// ({"id":…,"channel":…,"offset":) and tail from after the epoch and its
// comma ("type":…,"schema_version":…,"time":…,"freshness":…,"data":…}).
// The envelope is head, the offset, ,"epoch":, the epoch as a JSON string,
// a comma, and tail. Both share one allocation and must not be modified.
func EnvelopeParts(p *Publication) (head, tail []byte) {
	b := appendEnvelopeHead(make([]byte, 0, envelopeSizeHint(p)), p)
	n := len(b)
	b = appendEnvelopeTail(b, p)
	return b[:n:n], b[n:]
}

// appendCompactOrNull appends raw compacted, or null when raw is not
// valid JSON.
func appendCompactOrNull(b []byte, raw []byte) []byte {
	if out, ok := appendCompactJSON(b, raw); ok {
		return out
	}
	return append(b, "null"...)
}
