package gateway

import "net/http"

// Reason says why a connection was closed or a stream refused. Its Code is a
// metric label, a log field, the "reason" of the final disconnect event and
// the error code of a refused request.
type Reason struct {
	// Code is a stable snake_case identifier.
	Code string
	// Reconnect tells the client whether reconnecting can succeed without
	// changing anything (a fresh token counts as changing something).
	Reconnect bool
	// Status is the HTTP status of a request refused for this reason.
	Status int
	// Message describes the reason to a human.
	Message string
}

// String returns Code.
func (r Reason) String() string { return r.Code }

// The reasons a connection ends or a stream is refused.
var (
	// ReasonShutdown: the server is stopping; reconnect after the delay given
	// in the disconnect event (to another node behind the load balancer).
	ReasonShutdown = Reason{"shutdown", true, http.StatusServiceUnavailable, "server is shutting down"}
	// ReasonSlow: the client fell behind its send-queue bound; reconnect
	// with the last cursor to recover what was missed from history.
	ReasonSlow = Reason{"slow", true, 0, "client fell behind its send queue bound"}
	// ReasonTokenExpired: the token expired (at connect or during the
	// stream); fetch a fresh token, then reconnect.
	ReasonTokenExpired = Reason{"token_expired", true, http.StatusUnauthorized, "token expired"}
	// ReasonUnauthorized: no token, or one that does not verify. Do not
	// reconnect with the same credentials.
	ReasonUnauthorized = Reason{"unauthorized", false, http.StatusUnauthorized, "missing or invalid token"}
	// ReasonForbidden: a requested channel is not allowed. Do not reconnect
	// with the same channels.
	ReasonForbidden = Reason{"forbidden", false, http.StatusForbidden, "channel not allowed"}
	// ReasonBadRequest: a malformed request (channel name, channel count,
	// cursor). Do not reconnect with the same request.
	ReasonBadRequest = Reason{"bad_request", false, http.StatusBadRequest, "bad request"}
	// ReasonTooManyConnections: the host is at its connection bound
	// (503), or the user at MaxConnectionsPerUser (429); reconnect after
	// a backoff (having closed other connections, in the second case).
	ReasonTooManyConnections = Reason{"too_many_connections", true, http.StatusServiceUnavailable, "too many connections on this host"}
	// ReasonServerError: an internal failure (broker or authorizer error);
	// reconnect after a backoff.
	ReasonServerError = Reason{"server_error", true, http.StatusInternalServerError, "internal server error"}
	// ReasonInsufficientState: publications were lost on their way to this
	// node and the history no longer holds them; reconnect with the last
	// cursor (the stream then says recovered:false for the channel).
	ReasonInsufficientState = Reason{"insufficient_state", true, 0, "publications were lost and the history cannot fill the gap"}
	// ReasonClientClosed: the client went away. Nothing is sent.
	ReasonClientClosed = Reason{"client_closed", true, 0, "client closed the connection"}
	// ReasonWriteTimeout: a batch could not be written within WriteTimeout
	// (a stalled network or client); reconnect with the last cursor.
	ReasonWriteTimeout = Reason{"write_timeout", true, 0, "write timed out"}
	// ReasonTimeout: a WebSocket client sent nothing within ClientTimeout,
	// or no connect frame within ConnectTimeout; reconnect with backoff.
	ReasonTimeout = Reason{"timeout", true, 0, "client sent nothing within the client timeout"}
	// ReasonMessageTooBig: a WebSocket message exceeded MaxMessageSize. Do
	// not reconnect to send the same message.
	ReasonMessageTooBig = Reason{"message_too_big", false, 0, "message exceeds the maximum message size"}
	// ReasonProtocolError: the client broke the herald.v1 protocol (a
	// binary or non-UTF-8 message, a request before connect). Do not
	// reconnect before fixing the client.
	ReasonProtocolError = Reason{"protocol_error", false, http.StatusBadRequest, "protocol violation"}
	// ReasonTooManyRequests: the client's address opened connections faster
	// than ConnectAttemptsPerIP; reconnect after the Retry-After delay.
	ReasonTooManyRequests = Reason{"too_many_requests", true, http.StatusTooManyRequests, "too many connection attempts from this address"}
	// ReasonRevoked: the token (jti) or its session (sid) was revoked
	// (herald revoke). Do not reconnect with the same token, and do not
	// silently fetch another one: a revoked session means the user must
	// sign in again, which the application decides.
	ReasonRevoked = Reason{"revoked", false, http.StatusUnauthorized, "the token or its session was revoked"}
	// ReasonAuthorizationUnavailable: the authorization webhook could not
	// be asked (down, slow, or a bad answer), so a subscription that needs
	// it was denied or ended. Subscribing again later may succeed: retry
	// with backoff.
	ReasonAuthorizationUnavailable = Reason{"authorization_unavailable", true, http.StatusServiceUnavailable, "the authorization webhook is unavailable"}
)

// Reasons lists every Reason, for docs and for pre-creating metric series.
var Reasons = []Reason{
	ReasonShutdown, ReasonSlow, ReasonTokenExpired, ReasonUnauthorized,
	ReasonForbidden, ReasonBadRequest, ReasonTooManyConnections,
	ReasonServerError, ReasonInsufficientState, ReasonClientClosed, ReasonWriteTimeout,
	ReasonTimeout, ReasonMessageTooBig, ReasonProtocolError, ReasonTooManyRequests,
	ReasonRevoked, ReasonAuthorizationUnavailable,
}
