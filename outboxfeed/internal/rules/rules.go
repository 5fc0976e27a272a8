// Package rules holds the rules of an outbox record that the producers'
// package (stage) and the Worker and stores share: type names, freshness,
// message ids; and the rule of a handler's name, which the webhook
// package's configuration checks too. It links no database driver, so
// neither the Worker nor the SQLite store links PostgreSQL's through stage.
package rules

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// ErrInvalid is wrapped by every error of these checks (it is
// stage.ErrInvalidNotification).
var ErrInvalid = errors.New("invalid notification")

// MaxBatchSize bounds a handler's batch: the records one claim of a
// partition takes (the Worker's BatchSize, a webhook's batch_size).
const MaxBatchSize = 10000

// MaxTypeLen bounds a notification type name.
const MaxTypeLen = 128

// Invalid returns an error wrapping ErrInvalid.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("stage: %w: "+format, append([]any{ErrInvalid}, args...)...)
}

// ValidateType checks a notification type name: 1–128 bytes of [a-z0-9_.-].
func ValidateType(t string) error {
	if t == "" || len(t) > MaxTypeLen {
		return Invalid("type must be 1–%d bytes", MaxTypeLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return Invalid("type %q: byte %q is not one of [a-z0-9_.-]", t, c)
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
		return Invalid("freshness: %v", err)
	}
	switch f.Mode {
	case "immediate":
		return nil
	case "advisory":
		if f.Authority == nil || *f.Authority == "" {
			return Invalid("freshness: advisory mode needs an authority")
		}
		return nil
	}
	return Invalid("freshness: mode %q: must be immediate or advisory", f.Mode)
}

// ParseID checks that id is a message id (a uuid in its 36-character form)
// and returns it in the canonical lower-case form the outbox stores.
func ParseID(id string) (string, error) {
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return "", Invalid("id %q is not a uuid", id)
	}
	return u.String(), nil
}

// NewID returns a new message id: a time-ordered (version 7) uuid. Records
// staged together then sit side by side in the id index, which a random
// uuid would scatter over the whole index (a page read and written per
// record once the index outgrows memory).
func NewID() (string, error) {
	u, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("stage: new id: %w", err)
	}
	return u.String(), nil
}

// MaxHandlerNameLen bounds a handler's name.
const MaxHandlerNameLen = 64

// RealtimeHandler is the built-in handler's name.
const RealtimeHandler = "realtime"

// ValidateHandlerName checks a handler's name: 1–64 bytes of [a-z0-9_-].
func ValidateHandlerName(name string) error {
	if name == "" || len(name) > MaxHandlerNameLen {
		return fmt.Errorf("handler name %q: must be 1 to %d bytes of [a-z0-9_-]", name, MaxHandlerNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("handler name %q: byte %q is not one of [a-z0-9_-]", name, c)
		}
	}
	return nil
}
