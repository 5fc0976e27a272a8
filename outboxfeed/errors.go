package outboxfeed

import (
	"errors"

	"github.com/heraldgw/herald/internal/lifecycle"
)

// Sentinel errors. Wrapped errors carry the detail; test with errors.Is.
var (
	// ErrNotFound is returned by Get for an id no record has.
	ErrNotFound = errors.New("outboxfeed: record not found")
	// ErrInvalidConfig wraps every configuration error.
	ErrInvalidConfig = errors.New("outboxfeed: invalid config")
	// ErrInvalidRegistry wraps every type-registry error.
	ErrInvalidRegistry = errors.New("outboxfeed: invalid type registry")
	// ErrNotReady is what Worker.Readiness reports while the outbox store
	// does not answer or before the Worker first reached it.
	ErrNotReady = errors.New("outboxfeed: outbox store not ready")
	// ErrCorruptRecord is returned when a stored row's columns match none
	// of the lifecycle states (the CHECK constraints make this impossible
	// unless they were removed by hand).
	ErrCorruptRecord = errors.New("outboxfeed: record matches no lifecycle state")
	// ErrRollbackRefused is wrapped by a store's MigrateTo when it does
	// not take the schema back to the version asked: a step on the way
	// cannot be reversed, or not now (a Worker still holds a lease, say).
	// The message says what to do instead.
	ErrRollbackRefused = errors.New("outboxfeed: schema rollback refused")
	// ErrLeaseLost is wrapped by Store.Renew when the batch's lease is
	// no longer its owner's (another owner claimed the partition, or the
	// batch was completed): the lease is not extended, and the batch's
	// completion would be refused too.
	ErrLeaseLost = errors.New("outboxfeed: lease lost")
	// ErrStopped is wrapped by Worker.Start and Pruner.Start after Stop.
	ErrStopped = lifecycle.ErrStopped
	// ErrStarted is wrapped by a second Worker.Start or Pruner.Start.
	ErrStarted = lifecycle.ErrStarted
)
