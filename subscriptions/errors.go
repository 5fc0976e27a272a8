package subscriptions

import (
	"errors"

	"github.com/heraldgw/herald/internal/names"
)

var (
	// ErrInvalidName is wrapped by every channel- or tenant-name error.
	ErrInvalidName = names.ErrInvalidName
	// ErrInvalidGrant is wrapped by every grant-pattern error.
	ErrInvalidGrant = errors.New("invalid grant")
	// ErrForbidden means the caller holds no grant for the channel.
	ErrForbidden = errors.New("forbidden")
)
