package subscriptions

import "errors"

var (
	// ErrInvalidName is wrapped by every channel- or tenant-name error.
	ErrInvalidName = errors.New("invalid name")
	// ErrInvalidGrant is wrapped by every grant-pattern error.
	ErrInvalidGrant = errors.New("invalid grant")
	// ErrForbidden means the caller holds no grant for the channel.
	ErrForbidden = errors.New("forbidden")
)
