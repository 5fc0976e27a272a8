package storekit

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/rules"
)

// Invalid wraps a request error in outboxfeed.ErrInvalidRequest.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{outboxfeed.ErrInvalidRequest}, args...)...)
}

// SetOf is ids as a set.
func SetOf(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// JSONStrings is v as a JSON array (SQLite's json_each takes it).
func JSONStrings(v []string) string {
	b, _ := json.Marshal(v) // a []string always encodes
	return string(b)
}

// ValidUUID reports whether s is a message id in its 36-character form.
func ValidUUID(s string) bool {
	_, err := rules.ParseID(s)
	return err == nil
}

// CanonicalID returns id in canonical lower-case form, or a new
// time-ordered one (a version 7 uuid) when id is empty.
func CanonicalID(id string) (string, error) {
	if id == "" {
		return rules.NewID()
	}
	return rules.ParseID(id)
}

// StateColumns are a row's lifecycle columns, as read from either store.
type StateColumns struct {
	State          string
	Attempt        int
	NextAttemptAt  time.Time
	LeaseOwner     *string
	LeaseExpiresAt *time.Time
	Fence          int64
	LastError      *string
	DispatchedAt   *time.Time
	DeadLetteredAt *time.Time
}

// Decode builds the sealed state, refusing combinations the CHECK
// constraints forbid.
func (c *StateColumns) Decode() (outboxfeed.State, error) {
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	switch c.State {
	case outboxfeed.StatePending:
		if c.LeaseOwner == nil && c.LeaseExpiresAt == nil && c.DispatchedAt == nil && c.DeadLetteredAt == nil {
			return outboxfeed.Pending{Attempt: c.Attempt, NextAttemptAt: c.NextAttemptAt, LastError: str(c.LastError)}, nil
		}
	case outboxfeed.StateProcessing:
		if c.LeaseOwner != nil && c.LeaseExpiresAt != nil && c.DispatchedAt == nil && c.DeadLetteredAt == nil {
			return outboxfeed.Processing{LeaseOwner: *c.LeaseOwner, LeaseExpiresAt: *c.LeaseExpiresAt, Fence: c.Fence, Attempt: c.Attempt}, nil
		}
	case outboxfeed.StateDispatched:
		if c.DispatchedAt != nil && c.LeaseOwner == nil && c.LeaseExpiresAt == nil && c.DeadLetteredAt == nil {
			return outboxfeed.Dispatched{At: *c.DispatchedAt, Attempt: c.Attempt}, nil
		}
	case outboxfeed.StateDeadLetter:
		if c.DeadLetteredAt != nil && c.LastError != nil && c.LeaseOwner == nil && c.LeaseExpiresAt == nil && c.DispatchedAt == nil {
			return outboxfeed.DeadLetter{Reason: *c.LastError, Attempts: c.Attempt, At: *c.DeadLetteredAt}, nil
		}
	}
	return nil, fmt.Errorf("%w: state %q", outboxfeed.ErrCorruptRecord, c.State)
}

// MaxErrorLen bounds a stored last_error.
const MaxErrorLen = 2000

// TruncateError makes an error text storable: valid UTF-8 without NUL
// bytes (PostgreSQL text refuses both), cut to MaxErrorLen bytes on a rune
// boundary.
func TruncateError(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) <= MaxErrorLen {
		return s
	}
	cut := MaxErrorLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Rows is what OneRecord reads of a driver's query result.
type Rows interface {
	Next() bool
	Err() error
}

// OneRecord is the record of a get by id: the first of rows, read with
// scan, or outboxfeed.ErrNotFound naming id when there is none.
func OneRecord[R Rows](id string, rows R, scan func(R) (outboxfeed.Record, error)) (outboxfeed.Record, error) {
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return outboxfeed.Record{}, fmt.Errorf("outboxfeed: get: %w", err)
		}
		return outboxfeed.Record{}, fmt.Errorf("%w: %s", outboxfeed.ErrNotFound, id)
	}
	r, err := scan(rows)
	if err != nil {
		return outboxfeed.Record{}, fmt.Errorf("outboxfeed: get: %w", err)
	}
	return r, nil
}

// ReadsJSON is a reader's reads as the reader table keeps them: a JSON
// array, [] for none.
func ReadsJSON(reads []outboxfeed.TypeVersion) (string, error) {
	if reads == nil {
		reads = []outboxfeed.TypeVersion{}
	}
	b, err := json.Marshal(reads)
	if err != nil {
		return "", fmt.Errorf("outboxfeed: reader heartbeat: %w", err)
	}
	return string(b), nil
}

// RegisterHandler is a store's RegisterHandler: spec normalized, then
// insert makes the handler's rows in one transaction and reports whether
// it created them (false: the handler was known), which is logged.
func RegisterHandler(spec outboxfeed.HandlerSpec, log *slog.Logger, insert func(outboxfeed.HandlerSpec) (bool, error)) (bool, error) {
	spec, err := spec.Normalized()
	if err != nil {
		return false, err
	}
	created, err := insert(spec)
	if err != nil {
		return false, fmt.Errorf("outboxfeed: register handler %s: %w", spec.Name, err)
	}
	if created {
		log.Info("outbox handler registered", "handler", spec.Name, "type", spec.Type, "start", spec.Start)
	}
	return created, nil
}
