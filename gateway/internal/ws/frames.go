package ws

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/heraldgw/herald/internal/names"
)

// Client operations of the herald.v1 protocol.
const (
	OpConnect     = "connect"
	OpSubscribe   = "subscribe"
	OpUnsubscribe = "unsubscribe"
	OpPublish     = "publish"
	OpRefresh     = "refresh"
	OpPing        = "ping"
	OpPong        = "pong"
)

// Op is one op of herald.v1: everything the gateway does with a frame
// that names it, in one place.
type Op struct {
	Name string
	// Reply: the op carries an id and gets a reply (every op but pong).
	Reply bool
	// BeforeConnect: the op is allowed before connect succeeded.
	BeforeConnect bool
	// Channel: the op names a channel, which must be valid.
	Channel bool
	// validate checks the op's own fields after decoding; nil: none.
	validate func(f *ClientFrame) error
	// Async: the op runs on a goroutine of its own and counts against
	// MaxInflight; otherwise the reader handles it in turn.
	Async bool
	// handle carries the op out.
	handle func(w *Conn, f *ClientFrame)
}

// OpTable is the herald.v1 op table (docs/protocol.md, "Requests and
// replies").
var OpTable = []Op{
	{Name: OpConnect, Reply: true, BeforeConnect: true, handle: (*Conn).connectOp},
	{Name: OpSubscribe, Reply: true, Channel: true, validate: validateSubscribe, Async: true, handle: (*Conn).subscribe},
	{Name: OpUnsubscribe, Reply: true, Channel: true, handle: (*Conn).unsubscribe},
	{Name: OpPublish, Reply: true, Channel: true, validate: validatePublish, Async: true, handle: (*Conn).publish},
	{Name: OpRefresh, Reply: true, validate: validateRefresh, Async: true, handle: (*Conn).refresh},
	{Name: OpPing, Reply: true, BeforeConnect: true, handle: func(w *Conn, f *ClientFrame) { w.reply(f.ID, OpPing, Empty{}) }},
	// Any frame proves the client alive (touch has run): a pong needs
	// nothing more.
	{Name: OpPong, BeforeConnect: true, handle: func(*Conn, *ClientFrame) {}},
}

// OpsByName indexes OpTable; OpNames lists the ops that get replies,
// for metric series. Both are filled by init (a table entry's handler
// reaches code that reads them).
var (
	OpsByName map[string]*Op
	OpNames   []string
)

func init() {
	OpsByName = make(map[string]*Op, len(OpTable))
	for i := range OpTable {
		op := &OpTable[i]
		OpsByName[op.Name] = op
		if op.Reply {
			OpNames = append(OpNames, op.Name)
		}
	}
}

// Error codes of herald.v1 error replies, and tickets_disabled, which only
// POST /v1/tickets answers (docs/protocol.md lists them).
const (
	CodeBadRequest           = "bad_request"
	CodeUnauthorized         = "unauthorized"
	CodeTokenExpired         = "token_expired"
	CodeForbidden            = "forbidden"
	CodeNotFound             = "not_found"
	CodeTooManyRequests      = "too_many_requests"
	CodeTooManySubscriptions = "too_many_subscriptions"
	CodeAlreadySubscribed    = "already_subscribed"
	CodeNotSubscribed        = "not_subscribed"
	CodeServerError          = "server_error"
	CodeRevoked              = "revoked"
	CodeTooManyConnections   = "too_many_connections"
	CodeAuthzUnavailable     = "authorization_unavailable"
	CodeDuplicateID          = "duplicate_id"
	CodeTicketsDisabled      = "tickets_disabled"
)

// Errors describes every error code, in the order docs/protocol.md
// lists them: whether it is temporary (the same request may succeed if
// retried later, unchanged) and what it means.
var Errors = []struct {
	Code      string
	Temporary bool
	Meaning   string
}{
	{CodeBadRequest, false, "malformed frame or field: not a JSON object, missing or non-integer `id`, an `id` of 2^53 or more, missing `op`, invalid channel, bad `since`, bad publish fields, a second `connect`"},
	{CodeNotFound, false, "unknown `op`"},
	{CodeTicketsDisabled, false, "HTTP only, `POST /v1/tickets` (404): the server has tickets switched off; a browser client may then put its token in the URL (`access_token`), and only after this code (a 404 without it, from a proxy, is a failure)"},
	{CodeUnauthorized, false, "the token (connect or refresh) is missing or does not verify"},
	{CodeTokenExpired, false, "the token (connect or refresh) has expired: fetch a fresh one"},
	{CodeForbidden, false, "the channel is not allowed (subscribe, publish), or the refresh token is for another subject or tenant"},
	{CodeAlreadySubscribed, false, "the channel is subscribed, or being subscribed"},
	{CodeNotSubscribed, false, "the channel is not subscribed, or still being subscribed"},
	{CodeTooManySubscriptions, false, "at `max_subscriptions`: unsubscribe from something first"},
	{CodeTooManyRequests, true, "`max_inflight` requests are running: wait for replies"},
	{CodeDuplicateID, false, "a request with this `id` is still in flight (its own reply follows): give every request an id of its own"},
	{CodeServerError, true, "the broker or the authorizer failed: retry with backoff"},
	{CodeAuthzUnavailable, true, "subscribe: the authorization webhook is down or slow; retry with backoff"},
	{CodeRevoked, false, "connect or refresh: the token or its session was revoked"},
	{CodeTooManyConnections, true, "connect: this user has `MaxConnectionsPerUser` connections open; close one first"},
}

// ErrorCodes maps every error code to whether it is temporary.
var ErrorCodes = func() map[string]bool {
	m := make(map[string]bool, len(Errors))
	for _, e := range Errors {
		m[e.Code] = e.Temporary
	}
	return m
}()

// maxFrameID is the largest request id: 2^53-1, the largest integer a
// JavaScript number (the browser client's id) holds exactly. A larger id
// would come back rounded, so its reply could not be matched.
const maxFrameID = 1<<53 - 1

// maxEpochBytes bounds the epoch a client may send in since.
const maxEpochBytes = 255

// ClientFrame is one decoded client→server frame. Unknown fields are
// ignored, so clients may send fields of later protocol versions.
type ClientFrame struct {
	ID            uint64          `json:"id"`
	Op            string          `json:"op"`
	Token         string          `json:"token"`
	Channel       string          `json:"channel"`
	Since         *Position       `json:"since"`
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schema_version"`
	Data          json.RawMessage `json:"data"`
}

// Position is a channel position on the wire.
type Position struct {
	Offset uint64 `json:"offset"`
	Epoch  string `json:"epoch"`
}

// frameError is why a client frame was refused: the error reply's code and
// message, and the request id when the frame held a readable one.
type frameError struct {
	id      uint64
	code    string
	message string
}

func (e *frameError) Error() string {
	return fmt.Sprintf("gateway: %s: %s: %s", ErrBadFrame, e.code, e.message)
}

// Unwrap makes every frameError match ErrBadFrame.
func (e *frameError) Unwrap() error { return ErrBadFrame }

// badFrame returns a frame error replying to id, or without an id when id
// is one a JavaScript client could not have sent (it would not recognise
// the reply as its own).
func badFrame(id uint64, code, format string, a ...any) *frameError {
	if id > maxFrameID {
		id = 0
	}
	return &frameError{id: id, code: code, message: fmt.Sprintf(format, a...)}
}

// decodeFrame decodes and validates one client frame: a JSON object with a
// known op, an id from 1 to 2^53-1 (except pong) and the fields its op
// needs. It never panics; every error is a *frameError, returned with the
// frame's id and op when they could be read.
func decodeFrame(b []byte) (ClientFrame, error) {
	var f ClientFrame
	if err := json.Unmarshal(b, &f); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			// A well-formed object with a mistyped field: the id may still be
			// readable (it is, unless the id itself is the bad field).
			id := f.ID
			if te.Field == "id" {
				id = 0
			}
			return ClientFrame{}, badFrame(id, CodeBadRequest, "field %q must be %s, not %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
		}
		return ClientFrame{}, badFrame(0, CodeBadRequest, "not a JSON object: %v", err)
	}
	op, known := OpsByName[f.Op]
	if known && !op.Reply {
		// It takes no id and gets no reply: whatever id it has is moot.
		f.ID = 0
		return f, nil
	}
	if f.ID > maxFrameID {
		return ClientFrame{}, badFrame(0, CodeBadRequest, "id must be a positive integer below 2^53")
	}
	switch {
	case f.Op == "":
		return ClientFrame{}, badFrame(f.ID, CodeBadRequest, "op is missing")
	case !known:
		return ClientFrame{}, badFrame(f.ID, CodeNotFound, "unknown op %q", trunc(f.Op, 32))
	}
	if f.ID == 0 {
		return ClientFrame{Op: f.Op}, badFrame(0, CodeBadRequest, "id must be a positive integer below 2^53")
	}
	if err := validateOp(op, &f); err != nil {
		return ClientFrame{ID: f.ID, Op: f.Op}, err
	}
	return f, nil
}

// validateOp checks the fields op needs.
func validateOp(op *Op, f *ClientFrame) error {
	if op.Channel {
		if f.Channel == "" {
			return badFrame(f.ID, CodeBadRequest, "channel is missing")
		}
		if err := names.ValidateChannel(f.Channel); err != nil {
			return badFrame(f.ID, CodeBadRequest, "%v", err)
		}
	}
	if op.validate != nil {
		return op.validate(f)
	}
	return nil
}

func validateSubscribe(f *ClientFrame) error {
	if f.Since != nil && (f.Since.Epoch == "" || len(f.Since.Epoch) > maxEpochBytes) {
		return badFrame(f.ID, CodeBadRequest, "since.epoch must be 1–%d bytes", maxEpochBytes)
	}
	return nil
}

func validatePublish(f *ClientFrame) error {
	if err := validateType(f.Type); err != nil {
		return badFrame(f.ID, CodeBadRequest, "%v", err)
	}
	if f.SchemaVersion < 1 {
		return badFrame(f.ID, CodeBadRequest, "schema_version must be an integer ≥ 1")
	}
	if len(f.Data) == 0 {
		return badFrame(f.ID, CodeBadRequest, "data is missing (any JSON value, null included)")
	}
	return nil
}

func validateRefresh(f *ClientFrame) error {
	if f.Token == "" {
		return badFrame(f.ID, CodeBadRequest, "token is missing")
	}
	return nil
}

// maxTypeLen bounds a notification type name (as the outbox does).
const maxTypeLen = 128

// validateType checks a notification type name: 1–128 of [a-z0-9_.-].
func validateType(t string) error {
	if t == "" || len(t) > maxTypeLen {
		return fmt.Errorf("type must be 1–%d bytes of [a-z0-9_.-]", maxTypeLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("type %q: byte %q is not one of [a-z0-9_.-]", trunc(t, 64), c)
		}
	}
	return nil
}

// jsonKind names a Go kind the way a JSON user would.
func jsonKind(kind string) string {
	switch kind {
	case "uint64", "int", "int64", "uint", "uint32", "int32":
		return "an integer"
	case "string":
		return "a string"
	case "struct", "ptr", "map":
		return "an object"
	case "slice":
		return "a JSON value"
	}
	return "of another type"
}

// trunc keeps echoed client input short.
func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
