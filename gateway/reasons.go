package gateway

import "github.com/heraldgw/herald/gateway/internal/session"

// Reason says why a connection was closed or a stream refused. Its Code is
// a metric label, a log field, the "reason" of the final disconnect event,
// the text of the WebSocket close frame and the error code of a refused
// request. The table of reasons is the connection core's
// (internal/session/reasons.go).
type Reason = session.Reason

// The reasons a connection ends or a stream is refused.
var (
	ReasonShutdown                 = session.ReasonShutdown
	ReasonSlow                     = session.ReasonSlow
	ReasonServerError              = session.ReasonServerError
	ReasonInsufficientState        = session.ReasonInsufficientState
	ReasonWriteTimeout             = session.ReasonWriteTimeout
	ReasonTimeout                  = session.ReasonTimeout
	ReasonTooManyConnections       = session.ReasonTooManyConnections
	ReasonTooManyRequests          = session.ReasonTooManyRequests
	ReasonClientClosed             = session.ReasonClientClosed
	ReasonTokenExpired             = session.ReasonTokenExpired
	ReasonAuthorizationUnavailable = session.ReasonAuthorizationUnavailable
	ReasonBadRequest               = session.ReasonBadRequest
	ReasonUnauthorized             = session.ReasonUnauthorized
	ReasonForbidden                = session.ReasonForbidden
	ReasonMessageTooBig            = session.ReasonMessageTooBig
	ReasonProtocolError            = session.ReasonProtocolError
	ReasonRevoked                  = session.ReasonRevoked
)

// Reasons lists every Reason in the order docs/protocol.md shows them, for
// docs and for pre-creating metric series.
var Reasons = session.Reasons
