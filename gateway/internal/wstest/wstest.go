// Package wstest is the herald.v1 WebSocket client of the gateway's tests
// and of its WebSocket transport's (internal/ws): the shared test client
// (internal/testclient), with every server frame parsed into the
// transport's own types and the requests and reads the tests make. It is
// for tests only.
package wstest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/internal/testclient"
)

// Frame is one server→client frame as a test sees it.
type Frame struct {
	Raw  string
	Push string // "" for replies
	// Replies.
	ID     uint64
	Result json.RawMessage
	Error  *ws.ErrorDetail
	// Publication pushes: the envelope behind {"push":"pub", as
	// fanout.DecodeEnvelope reads it.
	Pub fanout.Publication
	// Other pushes (disconnect, unsubscribed).
	Ctl CtlFrame
}

// CtlFrame is a disconnect or unsubscribed push.
type CtlFrame struct {
	Push        string `json:"push"`
	Channel     string `json:"channel"`
	Reason      string `json:"reason"`
	Reconnect   bool   `json:"reconnect"`
	Resubscribe bool   `json:"resubscribe"`
	DelayMS     int64  `json:"delay_ms"`
	Message     string `json:"message"`
}

// ParseFrame parses one server frame; a frame that is not JSON fails t.
func ParseFrame(t testing.TB, b []byte) Frame {
	var probe struct {
		Push string `json:"push"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		t.Errorf("server frame %q is not JSON: %v", b, err)
		return Frame{Raw: string(b)}
	}
	f := Frame{Raw: string(b), Push: probe.Push}
	var err error
	switch probe.Push {
	case "":
		var r struct {
			ID     uint64          `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *ws.ErrorDetail `json:"error"`
		}
		err = json.Unmarshal(b, &r)
		f.ID, f.Result, f.Error = r.ID, r.Result, r.Error
	case "pub":
		f.Pub, err = fanout.DecodeEnvelope(b)
	default:
		err = json.Unmarshal(b, &f.Ctl)
	}
	if err != nil {
		t.Errorf("server frame %q: %v", b, err)
	}
	return f
}

// fastPubFrame reads only the offset of a publication push.
func fastPubFrame(b []byte) Frame {
	f := Frame{Push: "pub"}
	if i := bytes.Index(b, []byte(`,"offset":`)); i >= 0 {
		for _, d := range b[i+len(`,"offset":`):] {
			if d < '0' || d > '9' {
				break
			}
			f.Pub.Offset = f.Pub.Offset*10 + uint64(d-'0')
		}
	}
	return f
}

// pubFramePrefix starts every publication push.
var pubFramePrefix = []byte(`{"push":"pub",`)

// Client is a herald.v1 test client on a real WebSocket: the shared test
// client (Stall, Resume, Close, Frames, Err, Conn, ...), with the requests
// and reads the tests make.
type Client struct {
	*testclient.WS[Frame]
	t      testing.TB
	nextID atomic.Uint64
}

// DialOpts configures Dial.
type DialOpts struct {
	Header       http.Header
	Subprotocols []string // default herald.v1
	Query        string
	Client       *http.Client
	Buffer       int // frames channel capacity; default 256
	// Fast parses publications only as far as their offset (for tests with
	// thousands of them under the race detector).
	Fast bool
}

// Dial opens base + "/v1/ws" (with o.Query) through o.Client, or def when
// o has none, and starts reading; the connection is closed when t ends.
// On a refused upgrade it returns the response.
func Dial(t testing.TB, base string, o DialOpts, def *http.Client) (*Client, *http.Response, error) {
	if o.Client == nil {
		o.Client = def
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := base + "/v1/ws"
	if o.Query != "" {
		u += "?" + o.Query
	}
	parse := func(line []byte) Frame {
		if o.Fast && bytes.HasPrefix(line, pubFramePrefix) {
			return fastPubFrame(line)
		}
		return ParseFrame(t, line)
	}
	w, resp, err := testclient.DialWS(ctx, u, testclient.WSOptions{
		Subprotocols: o.Subprotocols, Header: o.Header, HTTPClient: o.Client, Buffer: o.Buffer,
	}, parse)
	if err != nil {
		return nil, resp, err
	}
	c := &Client{WS: w, t: t}
	t.Cleanup(c.Close)
	return c, resp, nil
}

// SendFrame writes one frame: bytes and strings as they are, anything
// else as JSON.
func (c *Client) SendFrame(v any) {
	c.t.Helper()
	b, ok := v.([]byte)
	if !ok {
		if s, isStr := v.(string); isStr {
			b = []byte(s)
		} else {
			var err error
			if b, err = json.Marshal(v); err != nil {
				c.t.Fatal(err)
			}
		}
	}
	if err := c.Send(b); err != nil {
		s := string(b)
		if len(s) > 80 {
			s = s[:80]
		}
		c.t.Fatalf("write %s: %v", s, err)
	}
}

// Request sends op with a fresh id and the given fields; it returns the id.
func (c *Client) Request(op string, fields map[string]any) uint64 {
	c.t.Helper()
	id := c.nextID.Add(1)
	m := map[string]any{"id": id, "op": op}
	for k, v := range fields {
		m[k] = v
	}
	c.SendFrame(m)
	return id
}

// NextFrame returns the next frame, skipping server pings.
func (c *Client) NextFrame(timeout time.Duration) Frame {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case f, ok := <-c.Frames():
			if !ok {
				c.t.Fatalf("connection ended: %v", c.Err())
			}
			if f.Push == "ping" {
				continue
			}
			return f
		case <-deadline:
			c.t.Fatalf("no frame within %s", timeout)
		}
	}
}

// Reply waits for the reply to id, failing on any other frame first.
func (c *Client) Reply(id uint64) Frame {
	c.t.Helper()
	f := c.NextFrame(5 * time.Second)
	if f.Push != "" || f.ID != id {
		c.t.Fatalf("want the reply to %d, got %s", id, f.Raw)
	}
	return f
}

// OK waits for the success reply to id and decodes its result into v.
func (c *Client) OK(id uint64, v any) {
	c.t.Helper()
	f := c.Reply(id)
	if f.Error != nil {
		c.t.Fatalf("request %d failed: %+v", id, *f.Error)
	}
	if v != nil {
		if err := json.Unmarshal(f.Result, v); err != nil {
			c.t.Fatalf("result %s: %v", f.Result, err)
		}
	}
}

// Fails waits for the error reply to id with code.
func (c *Client) Fails(id uint64, code string) ws.ErrorDetail {
	c.t.Helper()
	f := c.Reply(id)
	if f.Error == nil || f.Error.Code != code || f.Error.Message == "" {
		c.t.Fatalf("want error %q, got %s", code, f.Raw)
	}
	if f.Error.Temporary != ws.ErrorCodes[code] {
		c.t.Fatalf("error %q temporary = %v", code, f.Error.Temporary)
	}
	return *f.Error
}

// Connect sends connect with token and returns its result.
func (c *Client) Connect(token string) ws.ConnectResult {
	c.t.Helper()
	fields := map[string]any{}
	if token != "" {
		fields["token"] = token
	}
	var res ws.ConnectResult
	c.OK(c.Request(ws.OpConnect, fields), &res)
	return res
}

// Connected sends connect with token, which must succeed, and returns c.
func (c *Client) Connected(token string) *Client {
	c.t.Helper()
	c.Connect(token)
	return c
}

// Subscribe subscribes to channel (resuming from since when given).
func (c *Client) Subscribe(channel string, since *ws.Position) ws.SubscribeResult {
	c.t.Helper()
	fields := map[string]any{"channel": channel}
	if since != nil {
		fields["since"] = since
	}
	var res ws.SubscribeResult
	c.OK(c.Request(ws.OpSubscribe, fields), &res)
	if res.Channel != channel {
		c.t.Fatalf("subscribe result for %q, want %q", res.Channel, channel)
	}
	return res
}

// Pub reads the next frame, which must be a publication.
func (c *Client) Pub() fanout.Publication {
	c.t.Helper()
	f := c.NextFrame(10 * time.Second)
	if f.Push != "pub" {
		c.t.Fatalf("want a publication, got %s", f.Raw)
	}
	return f.Pub
}

// Closed waits for the server to close the connection and returns the
// disconnect push (if one came) and the close status.
func (c *Client) Closed() (CtlFrame, websocket.StatusCode) {
	c.t.Helper()
	var d CtlFrame
	timeout := time.After(15 * time.Second)
	for {
		select {
		case f, ok := <-c.Frames():
			if !ok {
				return d, websocket.CloseStatus(c.Err())
			}
			if f.Push == "disconnect" {
				d = f.Ctl
			}
		case <-timeout:
			c.t.Fatalf("the server did not close the connection")
		}
	}
}

// ClosedWith waits for a disconnect push with reason and the close code.
func (c *Client) ClosedWith(reason string, code websocket.StatusCode) CtlFrame {
	c.t.Helper()
	d, status := c.Closed()
	if d.Reason != reason || status != code {
		c.t.Fatalf("closed with push %+v and status %d, want reason %q and status %d (%v)", d, status, reason, code, c.Err())
	}
	return d
}

// RefreshPush decodes f, which must be a refresh push.
func RefreshPush(t testing.TB, f Frame) ws.RefreshPush {
	t.Helper()
	var p ws.RefreshPush
	if f.Push != "refresh" {
		t.Fatalf("want a refresh push, got %s", f.Raw)
	}
	if err := json.Unmarshal([]byte(f.Raw), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// Mint mints c into an HS256 token with secret, failing t on error.
func Mint(t testing.TB, secret []byte, c auth.Claims) string {
	t.Helper()
	tok, err := auth.MintHS256(secret, c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
