package outboxfeed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/heraldgw/herald/outboxfeed/internal/rules"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/names"
)

// Publisher is what the Worker needs from a broker; fanout brokers satisfy
// it. Publish returns once the broker accepted msg.
type Publisher interface {
	Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error)
}

// A publish error is, by default, a broker outage: the record is given back
// without burning an attempt and the Worker backs off. A Publisher marks a
// failure that belongs to one message with Retryable or Permanent; an error
// wrapping fanout.ErrInvalidMessage is permanent too.
type messageError struct {
	err       error
	permanent bool
}

func (e *messageError) Error() string { return e.err.Error() }
func (e *messageError) Unwrap() error { return e.err }

// Retryable marks err as a failure of this one message (not of the
// broker): the record is retried with backoff, burning an attempt, and
// dead-lettered once the retry bound is reached.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &messageError{err: err}
}

// Permanent marks err as a failure no retry can clear: the record is
// dead-lettered at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &messageError{err: err, permanent: true}
}

// failureClass is how the Worker treats a failed publish.
type failureClass int

const (
	failureOutage failureClass = iota
	failureRetry
	failurePermanent
	failureGone
)

func classify(err error) failureClass {
	if errors.Is(err, fanout.ErrInvalidMessage) {
		return failurePermanent // the broker refused the message itself
	}
	var te *targetError
	if errors.As(err, &te) && te.gone {
		return failureGone
	}
	var me *messageError
	if errors.As(err, &me) {
		if me.permanent {
			return failurePermanent
		}
		return failureRetry
	}
	return failureOutage
}

// toMessage turns a claimed record into a broker message, or returns the
// permanent reason it cannot be delivered (dead-letter reason).
func toMessage(r *Record, reg *Registry) (fanout.Message, error) {
	if err := names.ValidateTenant(r.TenantID); err != nil {
		return fanout.Message{}, fmt.Errorf("invalid tenant_id: %v", err)
	}
	if err := names.ValidateChannel(r.Channel); err != nil {
		return fanout.Message{}, fmt.Errorf("invalid channel: %v", err)
	}
	if err := rules.ValidateType(r.Type); err != nil {
		return fanout.Message{}, err
	}
	// The PostgreSQL table does not check the kind (schema 12), nor the
	// version, which reg.Check refuses below 1: a plain SQL producer's
	// record of another kind is dead-lettered.
	if r.Kind != "" && !ValidKind(r.Kind) {
		return fanout.Message{}, fmt.Errorf("invalid kind %q: must be one of %s", r.Kind, strings.Join(Kinds, ", "))
	}
	// A reader for the (type, version), the catalogue's kind and payload
	// schema, before any handler sees it.
	if err := reg.Check(r); err != nil {
		return fanout.Message{}, err
	}
	if len(r.Payload) == 0 || (!r.PayloadIsJSON && !json.Valid(r.Payload)) {
		return fanout.Message{}, errPayloadNotJSON
	}
	freshness := r.Freshness
	if len(freshness) == 0 || isImmediate(freshness) {
		freshness = fanout.ImmediateFreshness
	} else if err := rules.ValidateFreshness(freshness); err != nil {
		return fanout.Message{}, err
	}
	return fanout.Message{
		ID:            r.ID,
		Key:           fanout.Key{Tenant: r.TenantID, Channel: r.Channel},
		Type:          r.Type,
		SchemaVersion: r.SchemaVersion,
		Time:          r.OccurredAt,
		Freshness:     freshness,
		Data:          r.Payload,
	}, nil
}

// isImmediate reports whether raw is the default freshness as the stores
// print it (PostgreSQL's jsonb puts a space after the colon): most records
// carry it, and decoding it for each would cost more than the rest of the
// checks together.
func isImmediate(raw []byte) bool {
	return string(raw) == `{"mode": "immediate"}` || string(raw) == `{"mode":"immediate"}`
}
