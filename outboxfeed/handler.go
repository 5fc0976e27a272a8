package outboxfeed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heraldgw/herald/outboxfeed/internal/rules"
)

// RealtimeHandler is the built-in handler: the realtime fan-out to
// channels. It always exists; with no other handler configured the outbox
// behaves as it did before handlers.
const RealtimeHandler = rules.RealtimeHandler

// ValidateHandlerName checks a handler's name: 1–64 bytes of [a-z0-9_-].
func ValidateHandlerName(name string) error { return rules.ValidateHandlerName(name) }

// HandlerState is a handler's state: only an active handler's Workers
// claim records.
type HandlerState string

const (
	// HandlerActive: its Workers claim and deliver.
	HandlerActive HandlerState = "active"
	// HandlerPaused: an operator paused it (herald handlers pause); its
	// records wait, none lost.
	HandlerPaused HandlerState = "paused"
	// HandlerDisabled: its target refused for good (a webhook endpoint
	// answered 410 Gone) or failed continuously past its horizon; its
	// records wait until an operator enables it (herald handlers enable).
	HandlerDisabled HandlerState = "disabled"
)

// Valid reports whether s is one of the states.
func (s HandlerState) Valid() bool {
	return s == HandlerActive || s == HandlerPaused || s == HandlerDisabled
}

// StartFrom is where a handler added to an outbox that already has
// records starts.
type StartFrom string

const (
	// StartRetained: every record still in the outbox (retention keeps
	// them 7 days by default) is delivered to it. The default.
	StartRetained StartFrom = "retained"
	// StartNew: only records committed after it was added.
	StartNew StartFrom = "new"
)

// HandlerSpec declares a handler to a store.
type HandlerSpec struct {
	// Name is the handler's name (ValidateHandlerName).
	Name string
	// Type is what the handler delivers to: "realtime", "webhook" or "go".
	Type string
	// Start is where it starts if the store does not know it yet.
	// Default: StartRetained.
	Start StartFrom
}

// Normalized applies the defaults and checks the spec.
func (s HandlerSpec) Normalized() (HandlerSpec, error) {
	if s.Start == "" {
		s.Start = StartRetained
	}
	if err := ValidateHandlerName(s.Name); err != nil {
		return s, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if s.Type == "" {
		return s, fmt.Errorf("%w: handler %q: no type", ErrInvalidConfig, s.Name)
	}
	if s.Start != StartRetained && s.Start != StartNew {
		return s, fmt.Errorf("%w: handler %q: start %q: must be retained or new", ErrInvalidConfig, s.Name, s.Start)
	}
	return s, nil
}

// HandlerInfo is what a store knows of a handler.
type HandlerInfo struct {
	Name  string
	Type  string
	State HandlerState
	Start StartFrom
	// CreatedAt is when the store first knew it.
	CreatedAt time.Time
	// StateReason and StateAt say why and when its state last changed.
	StateReason string
	StateAt     time.Time
	// FailingSince is when its target started failing continuously (zero
	// while it succeeds), LastError the last failure.
	FailingSince time.Time
	LastError    string
	// Readers counts its Workers that reported within the last minute.
	Readers int
}

// ErrNoHandler is returned for a handler the store does not know.
var ErrNoHandler = errors.New("outboxfeed: no such handler")

// HandlerStore is a Store that keeps positions per handler (both stores).
type HandlerStore interface {
	Store
	// ForHandler returns the Store of the named handler's positions,
	// retry queue and dead letters, over the same connections. Register
	// the handler first.
	ForHandler(name string) Store
	// RegisterHandler makes the store know spec's handler: a new one gets
	// positions starting at spec.Start; a known one keeps its own (and its
	// state). It reports whether the handler was new.
	RegisterHandler(ctx context.Context, spec HandlerSpec) (created bool, err error)
	// SetHandlerState changes a handler's state, with a reason for the
	// operator; ErrNoHandler if unknown.
	SetHandlerState(ctx context.Context, name string, state HandlerState, reason string) error
	// DisableHandler disables an active handler whose state has not
	// changed since unchangedSince, with a reason for the operator, in one
	// conditional write: a failure seen by a Worker never overrides a
	// later decision (an operator enabled or paused it while the request
	// that failed was under way). It reports whether it disabled the
	// handler; ErrNoHandler if unknown.
	DisableHandler(ctx context.Context, name, reason string, unchangedSince time.Time) (bool, error)
	// MarkFailing records that the handler's target started failing
	// (failing, with the error) or succeeds again. It returns since when
	// it has been failing (zero when not).
	MarkFailing(ctx context.Context, name string, failing bool, lastErr string) (since time.Time, err error)
	// Handlers lists the handlers the store knows, by name.
	Handlers(ctx context.Context) ([]HandlerInfo, error)
	// DropHandler deletes a handler (not realtime) with its positions,
	// retry queue, dead letters and batch log; records other handlers need
	// stay. ErrNoHandler if unknown.
	DropHandler(ctx context.Context, name string) error
}
