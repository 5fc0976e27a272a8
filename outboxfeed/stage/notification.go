package stage

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgw/herald/internal/names"
)

// Kinds of outbox record, as docs/delivery.md classifies messages.
const (
	KindNotification       = "notification"
	KindIntegrationEvent   = "integration_event"
	KindJourneyStepCommand = "journey_step_command"
	KindProviderSideEffect = "provider_side_effect"
)

// MaxTypeLen bounds a notification type name.
const MaxTypeLen = 128

// Notification is one record a producer stages.
type Notification struct {
	ID            string          // uuid; empty = generated
	TenantID      string          // required; one segment of [A-Za-z0-9_.:@-], at most 64 bytes
	Channel       string          // required; "/"-separated segments, at most 255 bytes
	Type          string          // required, [a-z0-9_.-], at most 128
	SchemaVersion int             // required, ≥ 1
	Payload       json.RawMessage // required, any JSON value
	Freshness     json.RawMessage // nil = {"mode":"immediate"}
	OccurredAt    time.Time       // zero = now
	Kind          string          // empty = "notification"
}

// Validate checks what the database also checks, so a producer gets a clear
// error before its transaction fails. Every error wraps
// ErrInvalidNotification.
func (n *Notification) Validate() error {
	if err := names.ValidateTenant(n.TenantID); err != nil {
		return invalid("%w", err)
	}
	if err := names.ValidateChannel(n.Channel); err != nil {
		return invalid("%w", err)
	}
	if err := ValidateType(n.Type); err != nil {
		return err
	}
	if n.SchemaVersion < 1 {
		return invalid("schema_version %d: must be ≥ 1", n.SchemaVersion)
	}
	if len(n.Payload) == 0 || !json.Valid(n.Payload) {
		return invalid("payload is not valid JSON")
	}
	if n.Freshness != nil {
		if err := ValidateFreshness(n.Freshness); err != nil {
			return err
		}
	}
	switch n.Kind {
	case "", KindNotification, KindIntegrationEvent, KindJourneyStepCommand, KindProviderSideEffect:
	default:
		return invalid("kind %q: must be one of notification, integration_event, journey_step_command, provider_side_effect", n.Kind)
	}
	return nil
}

// ValidateType checks a notification type name.
func ValidateType(t string) error {
	if t == "" || len(t) > MaxTypeLen {
		return invalid("type must be 1–%d bytes", MaxTypeLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return invalid("type %q: byte %q is not one of [a-z0-9_.-]", t, c)
		}
	}
	return nil
}

// ValidateFreshness accepts {"mode":"immediate"} and
// {"mode":"advisory","authority":"<record id>"}.
func ValidateFreshness(raw json.RawMessage) error {
	var f struct {
		Mode      string  `json:"mode"`
		Authority *string `json:"authority"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return invalid("freshness: %v", err)
	}
	switch f.Mode {
	case "immediate":
		return nil
	case "advisory":
		if f.Authority == nil || *f.Authority == "" {
			return invalid("freshness: advisory mode needs an authority")
		}
		return nil
	}
	return invalid("freshness: mode %q: must be immediate or advisory", f.Mode)
}

// ParseID checks that id is a message id (a uuid in its 36-character form)
// and returns it in the canonical lower-case form the outbox stores.
func ParseID(id string) (string, error) {
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return "", invalid("id %q is not a uuid", id)
	}
	return u.String(), nil
}

// invalid returns an error wrapping ErrInvalidNotification.
func invalid(format string, args ...any) error {
	return fmt.Errorf("stage: %w: "+format, append([]any{ErrInvalidNotification}, args...)...)
}
