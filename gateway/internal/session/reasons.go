package session

import (
	"net/http"

	"github.com/coder/websocket"
)

// Reason says why a connection was closed or a stream refused. Its Code is a
// metric label, a log field, the "reason" of the final disconnect event, the
// text of the WebSocket close frame and the error code of a refused
// request. Every Reason is declared once, below, with everything a client
// or an operator learns from it; docs/protocol.md's table, docs/metrics.md's
// label values and the JS client's fixture are generated from or checked
// against this table (the gateway's TestVocabulary* tests).
type Reason struct {
	// Code is a stable snake_case identifier.
	Code string
	// Reconnect tells the client whether reconnecting can succeed without
	// changing anything (a fresh token counts as changing something).
	Reconnect bool
	// Status is the HTTP status of a request refused for this reason; 0
	// when no request is refused for it.
	Status int
	// Close is the WebSocket close code announcing it; 0 when no close
	// frame of Herald's carries it (closeCode then picks the range's
	// catch-all).
	Close websocket.StatusCode
	// Message describes the reason to a human.
	Message string

	doc ReasonDoc
}

// ReasonDoc is what docs/protocol.md's disconnect-reason table says of a
// reason beyond its fields.
type ReasonDoc struct {
	Reconnect string // the "reconnect?" column
	SSE       string // how SSE conveys it: refused request / in-stream
	Close     string // the WS close code column, when more than the code
	Advice    string // what the client does
}

// String returns Code.
func (r Reason) String() string { return r.Code }

// WebSocket close codes of herald.v1. The range says what the client does:
//
//	4000–4099  reconnect (with backoff, or after the announced delay)
//	4100–4199  fetch a fresh token, then reconnect
//	4500–4599  do not reconnect: the same request would fail again
//
// A reason without its own code closes with the catch-all of its range.
const (
	CloseShutdown           websocket.StatusCode = 4000
	CloseSlow               websocket.StatusCode = 4001
	CloseServerError        websocket.StatusCode = 4002
	CloseInsufficientState  websocket.StatusCode = 4003
	CloseWriteTimeout       websocket.StatusCode = 4004
	CloseTimeout            websocket.StatusCode = 4005
	CloseTooManyConnections websocket.StatusCode = 4006
	CloseTooManyRequests    websocket.StatusCode = 4007
	CloseAuthzUnavailable   websocket.StatusCode = 4008 // reserved: it ends single subscriptions, never a connection
	CloseReconnect          websocket.StatusCode = 4099 // any other reason with Reconnect
	CloseTokenExpired       websocket.StatusCode = 4100
	CloseBadRequest         websocket.StatusCode = 4500 // reserved: a malformed upgrade gets HTTP 400, a malformed frame an error reply
	CloseUnauthorized       websocket.StatusCode = 4501
	CloseForbidden          websocket.StatusCode = 4502
	CloseMessageTooBig      websocket.StatusCode = 4503
	CloseProtocolError      websocket.StatusCode = 4504
	CloseRevoked            websocket.StatusCode = 4505
	CloseNoReconnect        websocket.StatusCode = 4599 // any other reason without Reconnect
)

// CloseCode is the close code announcing r.
func CloseCode(r Reason) websocket.StatusCode {
	switch {
	case r.Close != 0:
		return r.Close
	case r.Reconnect:
		return CloseReconnect
	}
	return CloseNoReconnect
}

// The reasons a connection ends or a stream is refused.
var (
	ReasonShutdown = Reason{Code: "shutdown", Reconnect: true, Status: http.StatusServiceUnavailable, Close: CloseShutdown,
		Message: "server is shutting down",
		doc: ReasonDoc{Reconnect: "yes, after `delay_ms`", SSE: "503 / `disconnect`",
			Advice: "wait the announced jittered delay, reconnect (another node answers), resume"}}
	ReasonSlow = Reason{Code: "slow", Reconnect: true, Close: CloseSlow,
		Message: "client fell further behind than the channel history reaches",
		doc: ReasonDoc{SSE: "— / `disconnect`",
			Advice: "the client read so slowly that the channel history no longer holds what it has not read (a client behind its send queue only catches up from the history; WebSocket: or it did not read its replies); reconnect with your positions (you will get `recovered: false`)"}}
	ReasonServerError = Reason{Code: "server_error", Reconnect: true, Status: http.StatusInternalServerError, Close: CloseServerError,
		Message: "internal server error",
		doc: ReasonDoc{Reconnect: "yes, with backoff", SSE: "500 / `disconnect`",
			Advice: "a broker or authorizer failure; reconnect with backoff, resume"}}
	ReasonInsufficientState = Reason{Code: "insufficient_state", Reconnect: true, Close: CloseInsufficientState,
		Message: "publications were lost and the history cannot fill the gap",
		doc: ReasonDoc{SSE: "— / `disconnect`",
			Advice: "publications were lost in transit and the history cannot fill the gap; reconnect with your positions (you will get `recovered: false`)"}}
	ReasonWriteTimeout = Reason{Code: "write_timeout", Reconnect: true, Close: CloseWriteTimeout,
		Message: "write timed out",
		doc: ReasonDoc{SSE: "— / (never seen: the stream is broken)", Close: "4004 (not deliverable)",
			Advice: "the network stalled; reconnect and resume"}}
	ReasonTimeout = Reason{Code: "timeout", Reconnect: true, Close: CloseTimeout,
		Message: "client sent nothing within the client timeout",
		doc: ReasonDoc{Reconnect: "yes, with backoff", SSE: "— / —",
			Advice: "WebSocket only: nothing received within the client timeout, or no `connect` within the connect timeout"}}
	ReasonTooManyConnections = Reason{Code: "too_many_connections", Reconnect: true, Status: http.StatusServiceUnavailable, Close: CloseTooManyConnections,
		Message: "too many connections on this host",
		doc: ReasonDoc{Reconnect: "yes, with backoff", SSE: "503 + `Retry-After` (node bound) or 429 (per-user bound)",
			Close:  "4006 (refused before upgrade: HTTP 503 / 429)",
			Advice: "the node is at its connection bound, or the user at `MaxConnectionsPerUser`: close other connections first"}}
	ReasonTooManyRequests = Reason{Code: "too_many_requests", Reconnect: true, Status: http.StatusTooManyRequests, Close: CloseTooManyRequests,
		Message: "too many connection attempts from this address",
		doc: ReasonDoc{Reconnect: "yes, after `Retry-After`", SSE: "429 + `Retry-After`", Close: "4007 (refused before upgrade: HTTP 429)",
			Advice: "too many connection attempts from your address"}}
	ReasonClientClosed = Reason{Code: "client_closed", Reconnect: true,
		Message: "client closed the connection",
		doc:     ReasonDoc{Reconnect: "—", SSE: "—", Close: "—", Advice: "the client went away; never sent"}}
	ReasonTokenExpired = Reason{Code: "token_expired", Reconnect: true, Status: http.StatusUnauthorized, Close: CloseTokenExpired,
		Message: "token expired",
		doc: ReasonDoc{Reconnect: "after fetching a fresh token",
			SSE:    "401 (an `EventSource`: a 200 stream with `reauth` + `disconnect`) / `reauth` + `disconnect`",
			Advice: "get a new token (or ticket) from your application, then reconnect (WebSocket: better, `refresh` when asked)"}}
	ReasonAuthorizationUnavailable = Reason{Code: "authorization_unavailable", Reconnect: true, Status: http.StatusServiceUnavailable, Close: CloseAuthzUnavailable,
		Message: "the authorization webhook is unavailable",
		doc: ReasonDoc{Reconnect: "yes, with backoff", SSE: "503 / `unsubscribed` event (or `disconnect` when it was the stream's last channel)",
			Close:  "4008, reserved: a WebSocket gets an error reply or an `unsubscribed` push and stays open",
			Advice: "the authorization webhook could not be asked: that one subscription was refused or ended; subscribe again later"}}
	ReasonBadRequest = Reason{Code: "bad_request", Status: http.StatusBadRequest, Close: CloseBadRequest,
		Message: "bad request",
		doc: ReasonDoc{SSE: "400",
			Close:  "4500 (reserved: a malformed upgrade request, such as an unparsable query string, is refused with HTTP 400 before the upgrade; a malformed frame gets an error reply and the connection stays)",
			Advice: "the request is malformed; fix it"}}
	ReasonUnauthorized = Reason{Code: "unauthorized", Status: http.StatusUnauthorized, Close: CloseUnauthorized,
		Message: "missing or invalid token",
		doc:     ReasonDoc{SSE: "401", Advice: "the token is missing or does not verify; do not retry with it"}}
	ReasonForbidden = Reason{Code: "forbidden", Status: http.StatusForbidden, Close: CloseForbidden,
		Message: "channel not allowed",
		doc: ReasonDoc{SSE: "403", Close: "4502 (reserved: a refused subscription gets an error reply; a refused origin gets HTTP 403)",
			Advice: "a channel is not allowed (SSE: the whole request is refused)"}}
	ReasonMessageTooBig = Reason{Code: "message_too_big", Close: CloseMessageTooBig,
		Message: "message exceeds the maximum message size",
		doc:     ReasonDoc{SSE: "—", Advice: "WebSocket only: a message exceeded the maximum message size"}}
	ReasonProtocolError = Reason{Code: "protocol_error", Status: http.StatusBadRequest, Close: CloseProtocolError,
		Message: "protocol violation",
		doc:     ReasonDoc{SSE: "—", Advice: "WebSocket only: a binary or non-UTF-8 message, or a request before `connect`"}}
	ReasonRevoked = Reason{Code: "revoked", Status: http.StatusUnauthorized, Close: CloseRevoked,
		Message: "the token or its session was revoked",
		doc: ReasonDoc{SSE: "401 / `disconnect`",
			Advice: "the token (`jti`) or its session (`sid`) was revoked (`herald revoke`). Do not reconnect with it and do not silently fetch another: drop the credentials and send the user through your sign-in"}}
)

// Reasons lists every Reason in the order docs/protocol.md shows them, for
// docs and for pre-creating metric series.
var Reasons = []Reason{
	ReasonShutdown, ReasonSlow, ReasonServerError, ReasonInsufficientState,
	ReasonWriteTimeout, ReasonTimeout, ReasonTooManyConnections, ReasonTooManyRequests,
	ReasonClientClosed, ReasonTokenExpired, ReasonAuthorizationUnavailable,
	ReasonBadRequest, ReasonUnauthorized, ReasonForbidden, ReasonMessageTooBig,
	ReasonProtocolError, ReasonRevoked,
}

// WithMessage returns r with a specific message for the client.
func WithMessage(r Reason, msg string) Reason {
	r.Message = msg
	return r
}

// DocOf returns what docs/protocol.md's disconnect-reason table says of r
// beyond its fields.
func DocOf(r Reason) ReasonDoc { return r.doc }
