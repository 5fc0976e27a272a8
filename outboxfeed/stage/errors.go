package stage

import (
	"errors"

	"github.com/heraldgw/herald/outboxfeed/internal/rules"
)

// ErrInvalidNotification is wrapped by every error of Notification.Validate
// (and so of Stage and StageSQL before they touch the database), and by an
// id that is not a uuid.
var ErrInvalidNotification = rules.ErrInvalid

// ErrUnknownDialect means DetectDialect does not know the driver, or
// StageSQL was given the zero Dialect.
var ErrUnknownDialect = errors.New("unknown SQL dialect")
