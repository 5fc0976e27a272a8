package stage

import "errors"

// ErrInvalidNotification is wrapped by every error of Notification.Validate
// (and so of Stage and StageSQL before they touch the database), and by an
// id that is not a uuid.
var ErrInvalidNotification = errors.New("invalid notification")

// ErrUnknownDialect means DetectDialect does not know the driver, or
// StageSQL was given the zero Dialect.
var ErrUnknownDialect = errors.New("unknown SQL dialect")
