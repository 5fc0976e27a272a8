package gateway

import "github.com/coder/websocket"

// WebSocket close codes of herald.v1. The range says what the client does:
//
//	4000–4099  reconnect (with backoff, or after the announced delay)
//	4100–4199  fetch a fresh token, then reconnect
//	4500–4599  do not reconnect: the same request would fail again
//
// A reason without its own code closes with the generic code of its range.
const (
	closeShutdown           websocket.StatusCode = 4000
	closeSlow               websocket.StatusCode = 4001
	closeServerError        websocket.StatusCode = 4002
	closeInsufficientState  websocket.StatusCode = 4003
	closeWriteTimeout       websocket.StatusCode = 4004
	closeTimeout            websocket.StatusCode = 4005
	closeTooManyConnections websocket.StatusCode = 4006
	closeTooManyRequests    websocket.StatusCode = 4007
	closeAuthzUnavailable   websocket.StatusCode = 4008 // reserved: it ends single subscriptions, never a connection
	closeReconnect          websocket.StatusCode = 4099 // any other reason with Reconnect
	closeTokenExpired       websocket.StatusCode = 4100
	closeBadRequest         websocket.StatusCode = 4500 // reserved: a malformed upgrade gets HTTP 400, a malformed frame an error reply
	closeUnauthorized       websocket.StatusCode = 4501
	closeForbidden          websocket.StatusCode = 4502
	closeMessageTooBig      websocket.StatusCode = 4503
	closeProtocolError      websocket.StatusCode = 4504
	closeRevoked            websocket.StatusCode = 4505
	closeNoReconnect        websocket.StatusCode = 4599 // any other reason without Reconnect
)

// wsCloseCodes maps every Reason code to its close code. client_closed has
// none: the client closed, so no close frame of ours carries it.
var wsCloseCodes = map[string]websocket.StatusCode{
	ReasonShutdown.Code:                 closeShutdown,
	ReasonSlow.Code:                     closeSlow,
	ReasonServerError.Code:              closeServerError,
	ReasonInsufficientState.Code:        closeInsufficientState,
	ReasonWriteTimeout.Code:             closeWriteTimeout,
	ReasonTimeout.Code:                  closeTimeout,
	ReasonTooManyConnections.Code:       closeTooManyConnections,
	ReasonTooManyRequests.Code:          closeTooManyRequests,
	ReasonTokenExpired.Code:             closeTokenExpired,
	ReasonBadRequest.Code:               closeBadRequest,
	ReasonUnauthorized.Code:             closeUnauthorized,
	ReasonForbidden.Code:                closeForbidden,
	ReasonMessageTooBig.Code:            closeMessageTooBig,
	ReasonProtocolError.Code:            closeProtocolError,
	ReasonRevoked.Code:                  closeRevoked,
	ReasonAuthorizationUnavailable.Code: closeAuthzUnavailable,
}

// closeCode is the close code announcing r.
func closeCode(r Reason) websocket.StatusCode {
	if c, ok := wsCloseCodes[r.Code]; ok {
		return c
	}
	if r.Reconnect {
		return closeReconnect
	}
	return closeNoReconnect
}
