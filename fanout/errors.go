package fanout

import (
	"errors"

	"github.com/heraldgw/herald/internal/lifecycle"
)

var (
	// ErrInvalidMessage is wrapped by every Publish error caused by the
	// message itself (bad key, empty id or type, data that is not JSON).
	// Retrying such a message cannot succeed.
	ErrInvalidMessage = errors.New("invalid message")
	// ErrStaleFence is wrapped by a Publish refused because a publication
	// with a higher fence value for the same scope was accepted (see Fence).
	ErrStaleFence = errors.New("stale fence: a newer lease holder published")
	// ErrInvalidKey is wrapped when a tenant or channel name is not valid.
	ErrInvalidKey = errors.New("invalid key")
	// ErrInvalidEnvelope is wrapped by DecodeEnvelope errors.
	ErrInvalidEnvelope = errors.New("invalid envelope")
	// ErrInvalidConfig is wrapped by every configuration error.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrInvalidSubscriber is returned by Hub.Subscribe for a nil or
	// non-comparable Subscriber.
	ErrInvalidSubscriber = errors.New("invalid subscriber")
	// ErrAlreadyStarted is returned by a second Start.
	ErrAlreadyStarted = lifecycle.ErrStarted
	// ErrStopped is returned by calls made after Stop.
	ErrStopped = lifecycle.ErrStopped
)
