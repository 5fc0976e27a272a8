package gateway

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
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/internal/testclient"
)

// wsFrame is one server→client frame as a test sees it.
type wsFrame struct {
	Raw  string
	Push string // "" for replies
	// Replies.
	ID     uint64
	Result json.RawMessage
	Error  *ws.ErrorDetail
	// Publication pushes.
	Pub wsPubFrame
	// Other pushes (disconnect, unsubscribed).
	Ctl wsCtlFrame
}

// wsPubFrame is a publication push: the envelope fields.
type wsPubFrame struct {
	Push          string          `json:"push"`
	ID            string          `json:"id"`
	Channel       string          `json:"channel"`
	Offset        uint64          `json:"offset"`
	Epoch         string          `json:"epoch"`
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schema_version"`
	Time          time.Time       `json:"time"`
	Freshness     json.RawMessage `json:"freshness"`
	Data          json.RawMessage `json:"data"`
}

// wsCtlFrame is a disconnect or unsubscribed push.
type wsCtlFrame struct {
	Push        string `json:"push"`
	Channel     string `json:"channel"`
	Reason      string `json:"reason"`
	Reconnect   bool   `json:"reconnect"`
	Resubscribe bool   `json:"resubscribe"`
	DelayMS     int64  `json:"delay_ms"`
	Message     string `json:"message"`
}

func parseWSFrame(t testing.TB, b []byte) wsFrame {
	var probe struct {
		Push string `json:"push"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		t.Errorf("server frame %q is not JSON: %v", b, err)
		return wsFrame{Raw: string(b)}
	}
	f := wsFrame{Raw: string(b), Push: probe.Push}
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
		err = json.Unmarshal(b, &f.Pub)
	default:
		err = json.Unmarshal(b, &f.Ctl)
	}
	if err != nil {
		t.Errorf("server frame %q: %v", b, err)
	}
	return f
}

// fastPubFrame reads only the offset of a publication push.
func fastPubFrame(b []byte) wsFrame {
	f := wsFrame{Push: "pub"}
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

// wsClient is a herald.v1 test client on a real WebSocket: the shared
// test client, with the requests and reads the gateway's tests make.
type wsClient struct {
	*testclient.WS[wsFrame]
	t      testing.TB
	conn   *websocket.Conn
	frames <-chan wsFrame
	err    error // why the reader stopped; valid once frames is closed
	nextID atomic.Uint64
}

type dialOpts struct {
	header      http.Header
	subprotocol []string // default herald.v1
	query       string
	client      *http.Client
	buffer      int // frames channel capacity; default 256
	// fast parses publications only as far as their offset (for tests with
	// thousands of them under the race detector).
	fast bool
}

// dialWS opens /v1/ws and starts reading; it fails the test if the
// handshake fails.
func (e *testEnv) dialWS(o dialOpts) *wsClient {
	e.t.Helper()
	c, resp, err := e.tryDialWS(o)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		e.t.Fatalf("dial /v1/ws: status %d: %v", status, err)
	}
	return c
}

func (e *testEnv) tryDialWS(o dialOpts) (*wsClient, *http.Response, error) {
	return dialWSURL(e.t, "ws://"+e.srv.Addr(), o, e.client)
}

func dialWSURL(t testing.TB, base string, o dialOpts, def *http.Client) (*wsClient, *http.Response, error) {
	if o.client == nil {
		o.client = def
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := base + "/v1/ws"
	if o.query != "" {
		u += "?" + o.query
	}
	parse := func(line []byte) wsFrame {
		if o.fast && bytes.HasPrefix(line, pubFramePrefix) {
			return fastPubFrame(line)
		}
		return parseWSFrame(t, line)
	}
	c := &wsClient{t: t}
	ws, resp, err := testclient.DialWS(ctx, u, testclient.WSOptions{
		Subprotocols: o.subprotocol, Header: o.header, HTTPClient: o.client, Buffer: o.buffer,
		OnEnd: func(err error) { c.err = err },
	}, parse)
	if err != nil {
		return nil, resp, err
	}
	c.WS, c.conn, c.frames = ws, ws.Conn, ws.Frames()
	t.Cleanup(c.close)
	return c, resp, nil
}

// stall makes the client stop reading after the message it is reading.
func (c *wsClient) stall() { c.Stall() }

// resume makes a stalled client read again.
func (c *wsClient) resume() { c.Resume() }

// close ends the connection from the client's side and waits for the
// reader.
func (c *wsClient) close() { c.Close() }

// send writes one frame.
func (c *wsClient) send(v any) {
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
		c.t.Fatalf("write %s: %v", trunc(string(b), 80), err)
	}
}

// request sends op with a fresh id and the given fields; it returns the id.
func (c *wsClient) request(op string, fields map[string]any) uint64 {
	c.t.Helper()
	id := c.nextID.Add(1)
	m := map[string]any{"id": id, "op": op}
	for k, v := range fields {
		m[k] = v
	}
	c.send(m)
	return id
}

// next returns the next frame, skipping server pings unless keepPings.
func (c *wsClient) next(timeout time.Duration) wsFrame {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("connection ended: %v", c.err)
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

// reply waits for the reply to id, failing on any other frame first.
func (c *wsClient) reply(id uint64) wsFrame {
	c.t.Helper()
	f := c.next(5 * time.Second)
	if f.Push != "" || f.ID != id {
		c.t.Fatalf("want the reply to %d, got %s", id, f.Raw)
	}
	return f
}

// ok waits for the success reply to id and decodes its result into v.
func (c *wsClient) ok(id uint64, v any) {
	c.t.Helper()
	f := c.reply(id)
	if f.Error != nil {
		c.t.Fatalf("request %d failed: %+v", id, *f.Error)
	}
	if v != nil {
		if err := json.Unmarshal(f.Result, v); err != nil {
			c.t.Fatalf("result %s: %v", f.Result, err)
		}
	}
}

// fails waits for the error reply to id with code.
func (c *wsClient) fails(id uint64, code string) ws.ErrorDetail {
	c.t.Helper()
	f := c.reply(id)
	if f.Error == nil || f.Error.Code != code || f.Error.Message == "" {
		c.t.Fatalf("want error %q, got %s", code, f.Raw)
	}
	if f.Error.Temporary != ws.ErrorCodes[code] {
		c.t.Fatalf("error %q temporary = %v", code, f.Error.Temporary)
	}
	return *f.Error
}

// connect sends connect with token and returns its result.
func (c *wsClient) connect(token string) ws.ConnectResult {
	c.t.Helper()
	fields := map[string]any{}
	if token != "" {
		fields["token"] = token
	}
	var res ws.ConnectResult
	c.ok(c.request(ws.OpConnect, fields), &res)
	return res
}

// subscribe subscribes to channel (resuming from since when given).
func (c *wsClient) subscribe(channel string, since *ws.Position) ws.SubscribeResult {
	c.t.Helper()
	fields := map[string]any{"channel": channel}
	if since != nil {
		fields["since"] = since
	}
	var res ws.SubscribeResult
	c.ok(c.request(ws.OpSubscribe, fields), &res)
	if res.Channel != channel {
		c.t.Fatalf("subscribe result for %q, want %q", res.Channel, channel)
	}
	return res
}

// pub reads the next frame, which must be a publication.
func (c *wsClient) pub() wsPubFrame {
	c.t.Helper()
	f := c.next(10 * time.Second)
	if f.Push != "pub" {
		c.t.Fatalf("want a publication, got %s", f.Raw)
	}
	return f.Pub
}

// closed waits for the server to close the connection and returns the
// disconnect push (if one came) and the close status.
func (c *wsClient) closed() (wsCtlFrame, websocket.StatusCode) {
	c.t.Helper()
	var d wsCtlFrame
	timeout := time.After(15 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				return d, websocket.CloseStatus(c.err)
			}
			if f.Push == "disconnect" {
				d = f.Ctl
			}
		case <-timeout:
			c.t.Fatalf("the server did not close the connection")
		}
	}
}

// closedWith waits for a disconnect push with reason and the close code.
func (c *wsClient) closedWith(reason string, code websocket.StatusCode) wsCtlFrame {
	c.t.Helper()
	d, status := c.closed()
	if d.Reason != reason || status != code {
		c.t.Fatalf("closed with push %+v and status %d, want reason %q and status %d (%v)", d, status, reason, code, c.err)
	}
	return d
}

// wsToken mints a connection token with subscribe and publish grants.
func (e *testEnv) wsToken(sub string, subscribe, publish []string) string {
	e.t.Helper()
	return e.mint(sub, time.Now().Add(time.Hour), subscribe, publish)
}

func (e *testEnv) mint(sub string, exp time.Time, subscribe, publish []string) string {
	e.t.Helper()
	tok, err := mintClaims(sub, "acme", exp, subscribe, publish, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// connected dials and connects with a token granting subscribe.
func (e *testEnv) connected(subscribe ...string) *wsClient {
	e.t.Helper()
	c := e.dialWS(dialOpts{})
	c.connect(e.wsToken("u1", subscribe, nil))
	return c
}

// eventually polls cond every few milliseconds until it holds, failing
// the test after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// mintClaims mints an HS256 token with testSecret.
func mintClaims(sub, tenant string, exp time.Time, subscribe, publish []string, channel string) (string, error) {
	return auth.MintHS256(testSecret, auth.Claims{
		Subject: sub, Tenant: tenant, Subscribe: subscribe, Publish: publish, Channel: channel, ExpiresAt: exp,
	})
}
