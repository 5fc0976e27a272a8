package stage

import (
	"encoding/json"
	"time"

	"github.com/heraldgw/herald/outboxfeed/internal/rules"

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
const MaxTypeLen = rules.MaxTypeLen

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

// Validate checks what the database or the Worker would refuse, so a
// producer gets a clear error before its transaction commits a record
// that would fail or be dead-lettered. Every error wraps
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

// ValidateType checks a notification type name: 1–128 bytes of
// [a-z0-9_.-].
func ValidateType(t string) error { return rules.ValidateType(t) }

// ValidateFreshness accepts {"mode":"immediate"} and
// {"mode":"advisory","authority":"<record id>"}.
func ValidateFreshness(raw json.RawMessage) error { return rules.ValidateFreshness(raw) }

// ParseID checks that id is a message id (a uuid in its 36-character form)
// and returns it in the canonical lower-case form the outbox stores.
func ParseID(id string) (string, error) { return rules.ParseID(id) }

// invalid returns an error wrapping ErrInvalidNotification.
func invalid(format string, args ...any) error { return rules.Invalid(format, args...) }
