// Package envelope writes the fields the publication envelope (fanout)
// and the webhook body (outboxfeed/webhook) share, in the order
// docs/protocol.md gives them, without reflection: a leaf, for the broker
// and the webhook sender alike.
package envelope

import (
	"strconv"
	"time"

	"github.com/heraldgw/herald/internal/jsonstr"
	"github.com/heraldgw/herald/internal/timefmt"
)

// AppendTyped appends a notification's type, schema version and time,
// up to the freshness value, which the caller writes:
// "type":…,"schema_version":…,"time":"…","freshness":
func AppendTyped(b []byte, typ string, schemaVersion int, t time.Time) []byte {
	b = append(b, `"type":`...)
	b = jsonstr.Append(b, typ)
	b = append(b, `,"schema_version":`...)
	b = strconv.AppendInt(b, int64(schemaVersion), 10)
	b = append(b, `,"time":"`...)
	b = timefmt.Append(b, t)
	return append(b, `","freshness":`...)
}
