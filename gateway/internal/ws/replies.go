package ws

import (
	"encoding/json"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
)

// Protocol is the WebSocket subprotocol a client must offer.
const Protocol = "herald.v1"

// Protocols lists every subprotocol the server speaks, as a handshake
// that offers none of them is told.
var Protocols = []string{Protocol}

// Server→client frames that never change, shared by every connection.
var (
	// pubPrefix starts a publication push; the envelope follows without its
	// opening brace: {"push":"pub","id":…,"channel":…,…}.
	pubPrefix = []byte(`{"push":"pub",`)
	// pingFrame is the server's application-level ping.
	pingFrame = []byte(`{"push":"ping"}`)
)

// Reply answers one request: {"id":…,"result":…} or {"id":…,"error":…}.
// id is omitted when the request's id could not be read.
type Reply struct {
	ID     uint64       `json:"id,omitempty"`
	Result any          `json:"result,omitempty"`
	Error  *ErrorDetail `json:"error,omitempty"`
}

// ErrorDetail is the error of a refused request.
type ErrorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Temporary bool   `json:"temporary"`
}

// Empty is the result of requests that return nothing ({}).
type Empty struct{}

// ConnectResult is the result of connect.
type ConnectResult struct {
	Client         string `json:"client"`
	Protocol       string `json:"protocol"`
	Version        string `json:"version"`
	PingIntervalMS int64  `json:"ping_interval_ms"`
	PongTimeoutMS  int64  `json:"pong_timeout_ms"`
	// ServerTimeMS is the server's clock (Unix milliseconds) when it
	// replied; ExpiresIn the seconds left until ExpiresAt by that clock
	// (0 once past it), so a client need not trust its own clock.
	ServerTimeMS int64    `json:"server_time_ms"`
	ExpiresAt    int64    `json:"expires_at"`
	ExpiresIn    int64    `json:"expires_in"`
	History      *History `json:"history,omitempty"`
	Limits       Limits   `json:"limits"`
}

// History announces how far back a resume position is served: the
// publications a channel's history holds and how long an idle channel
// keeps it. A field the server does not know is left out.
type History struct {
	Size  int   `json:"size,omitempty"`
	TTLMS int64 `json:"ttl_ms,omitempty"`
}

// Limits announces the bounds a client must respect.
type Limits struct {
	MaxMessageSize   int `json:"max_message_size"`
	MaxSubscriptions int `json:"max_subscriptions"`
	MaxInflight      int `json:"max_inflight"`
}

// SubscribeResult is the result of subscribe.
type SubscribeResult struct {
	Channel   string `json:"channel"`
	Recovered bool   `json:"recovered"`
	Reason    string `json:"reason,omitempty"` // why not recovered
	Offset    uint64 `json:"offset"`
	Epoch     string `json:"epoch"`
}

// PublishResult is the result of publish.
type PublishResult struct {
	ID     string `json:"id"`
	Offset uint64 `json:"offset"`
	Epoch  string `json:"epoch"`
}

// RefreshResult is the result of refresh.
type RefreshResult struct {
	ExpiresAt int64 `json:"expires_at"`
}

// UnsubscribedPush tells the client the server ended one subscription.
type UnsubscribedPush struct {
	Push        string `json:"push"` // "unsubscribed"
	Channel     string `json:"channel"`
	Reason      string `json:"reason"`
	Resubscribe bool   `json:"resubscribe"`
	Message     string `json:"message,omitempty"`
}

// RefreshPush asks the client for a fresh token (op refresh) before
// expires_at; without one the connection is closed grace_ms after it.
type RefreshPush struct {
	Push        string `json:"push"` // "refresh"
	ExpiresAt   int64  `json:"expires_at"`
	ExpiresInMS int64  `json:"expires_in_ms"`
	GraceMS     int64  `json:"grace_ms"`
}

// DisconnectPush is the last frame before the server closes.
type DisconnectPush struct {
	Push      string `json:"push"` // "disconnect"
	Reason    string `json:"reason"`
	Reconnect bool   `json:"reconnect"`
	DelayMS   int64  `json:"delay_ms"`
	Message   string `json:"message,omitempty"`
}

// encodeResult encodes a success reply.
func encodeResult(id uint64, result any) []byte {
	return mustJSON(Reply{ID: id, Result: result})
}

// encodeError encodes an error reply with code and message.
func encodeError(id uint64, code, message string) []byte {
	return mustJSON(Reply{ID: id, Error: &ErrorDetail{
		Code: code, Message: message, Temporary: ErrorCodes[code],
	}})
}

// encodeDisconnect encodes the disconnect push for r.
func encodeDisconnect(r session.Reason, delay time.Duration) []byte {
	return mustJSON(DisconnectPush{
		Push: "disconnect", Reason: r.Code, Reconnect: r.Reconnect,
		DelayMS: delay.Milliseconds(), Message: r.Message,
	})
}

// encodeRefresh encodes the refresh push for a token expiring at exp.
func encodeRefresh(exp time.Time, grace time.Duration) []byte {
	return mustJSON(RefreshPush{
		Push: "refresh", ExpiresAt: exp.Unix(),
		ExpiresInMS: max(0, time.Until(exp).Milliseconds()), GraceMS: grace.Milliseconds(),
	})
}

// encodeUnsubscribed encodes the push ending one subscription for r.
func encodeUnsubscribed(channel string, r session.Reason) []byte {
	return mustJSON(UnsubscribedPush{
		Push: "unsubscribed", Channel: channel, Reason: r.Code, Resubscribe: r.Reconnect, Message: r.Message,
	})
}

// mustJSON marshals values built from strings and numbers only, which
// cannot fail; a failure would be a programming error, answered with a
// server_error frame rather than a panic.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(`{"error":{"code":"server_error","message":"cannot encode the reply","temporary":true}}`)
	}
	return b
}
