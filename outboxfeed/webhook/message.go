package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/heraldgw/herald/internal/envelope"
	"github.com/heraldgw/herald/internal/jsonstr"
	"github.com/heraldgw/herald/internal/timefmt"
)

// Message is one outbox record as a webhook delivers it.
type Message struct {
	// ID is the message id (the outbox record's id): the webhook-id header
	// and the body's "id", the same on every retry and replay. 1 to
	// MaxIDLen bytes of [A-Za-z0-9_:-] (a "." would make the signed
	// content ambiguous; a space or a control byte cannot be a header).
	ID string
	// Tenant is the record's tenant.
	Tenant string
	// Channel is the record's channel, without the tenant.
	Channel string
	// Kind is the record's kind (notification, integration_event,
	// journey_step_command, provider_side_effect). Empty means
	// "notification".
	Kind string
	// Type is the notification type; required.
	Type string
	// SchemaVersion is the payload's version, ≥ 1.
	SchemaVersion int
	// Time is when the record was staged; required. The body carries it
	// in UTC with exactly nine fractional digits.
	Time time.Time
	// Freshness is the record's freshness object; nil means
	// {"mode":"immediate"}.
	Freshness json.RawMessage
	// Data is the payload, any JSON value; required.
	Data json.RawMessage
	// DataIsJSON says Data is known to be one valid JSON value (an outbox
	// record's payload the store keeps as jsonb, or one the Worker
	// checked): AppendBody then only drops the whitespace outside its
	// strings instead of validating it again. Data that is not valid JSON
	// would be sent as it is, so set it only when that is guaranteed.
	DataIsJSON bool
}

// MaxIDLen bounds Message.ID.
const MaxIDLen = 128

// TimeLayout is the body's "time": RFC 3339 in UTC with exactly nine
// fractional digits, as the publication envelope has it.
const TimeLayout = timefmt.Layout

// immediateFreshness is the freshness of a Message without one.
const immediateFreshness = `{"mode":"immediate"}`

// jsonbImmediate is immediateFreshness as PostgreSQL prints a jsonb value,
// what most records carry: copied, not compacted.
const jsonbImmediate = `{"mode": "immediate"}`

// AppendBody appends m's webhook body to dst: one compact JSON object, its
// fields in this order: id, tenant, channel, kind, type, schema_version,
// time, freshness, data. It is the publication envelope of
// docs/protocol.md without offset and epoch (positions in a channel's
// realtime history, which a webhook is not part of) and with the record's
// tenant and kind. Data and Freshness are compacted (Data without being
// validated again when DataIsJSON). Errors wrap
// ErrInvalidMessage; dst is then returned unchanged.
func AppendBody(dst []byte, m *Message) ([]byte, error) {
	if err := checkMessage(m); err != nil {
		return dst, err
	}
	start := len(dst)
	b := append(dst, `{"id":"`...)
	b = append(b, m.ID...) // checked: nothing to escape
	b = append(b, `","tenant":`...)
	b = jsonstr.Append(b, m.Tenant)
	b = append(b, `,"channel":`...)
	b = jsonstr.Append(b, m.Channel)
	b = append(b, `,"kind":`...)
	if m.Kind == "" {
		b = append(b, `"notification"`...)
	} else {
		b = jsonstr.Append(b, m.Kind)
	}
	b = envelope.AppendTyped(append(b, ','), m.Type, m.SchemaVersion, m.Time)
	var err error
	if m.Freshness == nil || string(m.Freshness) == immediateFreshness || string(m.Freshness) == jsonbImmediate {
		b = append(b, immediateFreshness...)
	} else if b, err = appendCompact(b, m.Freshness); err != nil {
		return dst[:start], fmt.Errorf("%w: freshness is not valid JSON", ErrInvalidMessage)
	}
	b = append(b, `,"data":`...)
	if m.DataIsJSON {
		return append(appendStripped(b, m.Data), '}'), nil
	}
	if b, err = appendCompact(b, m.Data); err != nil {
		return dst[:start], fmt.Errorf("%w: data is not valid JSON", ErrInvalidMessage)
	}
	return append(b, '}'), nil
}

// checkMessage checks what AppendBody needs.
func checkMessage(m *Message) error {
	if m.ID == "" || len(m.ID) > MaxIDLen {
		return fmt.Errorf("%w: id must be 1 to %d bytes", ErrInvalidMessage, MaxIDLen)
	}
	for i := 0; i < len(m.ID); i++ {
		if c := m.ID[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == ':' || c == '-') {
			return fmt.Errorf("%w: id %q: byte %q is not one of [A-Za-z0-9_:-]", ErrInvalidMessage, m.ID, c)
		}
	}
	switch {
	case m.Type == "":
		return fmt.Errorf("%w: id %s: type is empty", ErrInvalidMessage, m.ID)
	case m.SchemaVersion < 1:
		return fmt.Errorf("%w: id %s: schema_version %d: must be ≥ 1", ErrInvalidMessage, m.ID, m.SchemaVersion)
	case m.Time.IsZero():
		return fmt.Errorf("%w: id %s: time is zero", ErrInvalidMessage, m.ID)
	case len(m.Data) == 0:
		return fmt.Errorf("%w: id %s: data is empty", ErrInvalidMessage, m.ID)
	}
	return nil
}

// appendCompact appends raw with insignificant space removed, or fails
// when raw is not one valid JSON value.
func appendCompact(b []byte, raw []byte) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return b, err
	}
	return buf.Bytes(), nil
}

// appendStripped appends raw, one valid JSON value, without the
// whitespace outside its strings: what json.Compact makes of it, without
// its validating scan (BenchmarkBodyParts: about an eighth of its cost).
// Runs with nothing to drop are copied whole.
func appendStripped(b []byte, raw []byte) []byte {
	run := 0
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			// Skip the string: to the first quote not escaped.
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
		case ' ', '\t', '\n', '\r':
			b = append(b, raw[run:i]...)
			run = i + 1
		}
	}
	return append(b, raw[run:]...)
}
