package outboxfeed

import (
	"encoding/json"

	"github.com/heraldgw/herald/outboxfeed/stage"
)

// The producer vocabulary lives in the leaf package outboxfeed/stage, which
// an application can import without linking this package's SQLite driver,
// Redis or Prometheus. The names below keep outboxfeed's callers working.

// Kinds of outbox record, as docs/delivery.md classifies messages.
const (
	KindNotification       = stage.KindNotification
	KindIntegrationEvent   = stage.KindIntegrationEvent
	KindJourneyStepCommand = stage.KindJourneyStepCommand
	KindProviderSideEffect = stage.KindProviderSideEffect
)

// MaxTypeLen bounds a notification type name.
const MaxTypeLen = stage.MaxTypeLen

// Notification is one record a producer stages (stage.Notification).
type Notification = stage.Notification

// ValidateType checks a notification type name (stage.ValidateType).
func ValidateType(t string) error { return stage.ValidateType(t) }

// ValidateFreshness accepts {"mode":"immediate"} and
// {"mode":"advisory","authority":"<record id>"} (stage.ValidateFreshness).
func ValidateFreshness(raw json.RawMessage) error { return stage.ValidateFreshness(raw) }
