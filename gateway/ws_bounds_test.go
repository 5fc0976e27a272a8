package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// These tests drive a whole server: the handshake, the origin, the
// connection slots and the connect rate per address are decided by the
// server before a connection reaches its transport. The transport's own
// bounds (message size, client and connect timeouts) are tested in
// internal/ws.

// TestWSHandshakeRefusals: the handshakes refused before the upgrade, each
// with its status and JSON error.
func TestWSHandshakeRefusals(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{AllowedOrigins: []string{"app.example.com", "https://*.trusted.test"}}})
	refused := func(t *testing.T, o wstest.DialOpts, status int, code string) errorDetail {
		t.Helper()
		_, resp, err := e.tryDialWS(o)
		if err == nil || resp == nil || resp.StatusCode != status {
			t.Fatalf("dial = %v, %+v; want status %d", err, resp, status)
		}
		var body errorBody
		b, _ := io.ReadAll(resp.Body)
		if json.Unmarshal(b, &body) != nil || body.Error.Code != code || body.Error.Message == "" {
			t.Fatalf("body %s, want code %q", b, code)
		}
		return body.Error
	}
	// A refused subprotocol is told the ones the server speaks, in the
	// message and as a list.
	supported := func(t *testing.T, d errorDetail, offered string) {
		t.Helper()
		if !slices.Equal(d.Protocols, []string{ws.Protocol}) || !strings.Contains(d.Message, "speaks "+ws.Protocol) ||
			!strings.Contains(d.Message, offered) {
			t.Fatalf("refusal %+v: want protocols [%s], named in the message with %q", d, ws.Protocol, offered)
		}
	}
	t.Run("no subprotocol", func(t *testing.T) {
		supported(t, refused(t, wstest.DialOpts{Subprotocols: []string{}}, http.StatusBadRequest, "bad_request"), "no WebSocket subprotocol")
	})
	t.Run("other subprotocol", func(t *testing.T) {
		d := refused(t, wstest.DialOpts{Subprotocols: []string{"herald.v2", "chat"}}, http.StatusBadRequest, "bad_request")
		supported(t, d, `"herald.v2, chat"`)
	})
	t.Run("foreign origin", func(t *testing.T) {
		refused(t, wstest.DialOpts{Header: http.Header{"Origin": {"https://evil.example"}}}, http.StatusForbidden, "forbidden")
	})
	t.Run("scheme mismatch", func(t *testing.T) {
		refused(t, wstest.DialOpts{Header: http.Header{"Origin": {"http://a.trusted.test"}}}, http.StatusForbidden, "forbidden")
	})
	t.Run("allowed origins", func(t *testing.T) {
		for _, origin := range []string{"https://app.example.com", "https://x.trusted.test", "http://" + e.srv.Addr()} {
			c := e.dialWS(wstest.DialOpts{Header: http.Header{"Origin": {origin}}})
			c.Connect(e.wsToken("u1", nil, nil))
		}
	})
	t.Run("not an upgrade", func(t *testing.T) {
		status, _, body := e.get("/v1/ws")
		if status != http.StatusUpgradeRequired || !strings.Contains(body, ws.Protocol) {
			t.Fatalf("GET /v1/ws = %d %s", status, body)
		}
	})
	if n := e.counter(e.srv.metrics.httpRequests.WithLabelValues("/v1/ws", "101")); n != 3 {
		t.Fatalf("herald_http_requests_total{/v1/ws,101} = %v", n)
	}
}

// TestWSAllowAnyOrigin: "*" lets every origin in.
func TestWSAllowAnyOrigin(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{AllowedOrigins: []string{"*"}}})
	c := e.dialWS(wstest.DialOpts{Header: http.Header{"Origin": {"https://anywhere.example"}}})
	c.Connect(e.wsToken("u1", nil, nil))
}

// TestWSMaxConnections: a handshake beyond MaxConnections is refused with
// 503 before the upgrade.
func TestWSMaxConnections(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{MaxConnections: 1}})
	c := e.connected("orders/*")
	_, resp, err := e.tryDialWS(wstest.DialOpts{})
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("dial beyond the bound = %v, %+v", err, resp)
	}
	c.Close()
	eventually(t, 5*time.Second, "the slot to be free", func() bool { return e.srv.slots.Load() == 0 })
	e.connected("orders/*")
	if n := e.counter(e.srv.metrics.limitRejections.WithLabelValues(limitConnections)); n != 1 {
		t.Fatalf("herald_limit_rejections_total{connections} = %v", n)
	}
}

// TestConnectAttemptsPerIP: both transports refuse connection attempts
// beyond the per-address rate with 429 and Retry-After.
func TestConnectAttemptsPerIP(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{ConnectAttemptsPerIP: 0.5, ConnectAttemptsBurst: 3}})
	tok := e.token("acme", "u1", "orders/*")
	e.stream(tok, "orders/1")                                                  // 1
	e.dialWS(wstest.DialOpts{}).Connect(tok)                                   // 2
	e.refused(request{bearer: "bad"}, http.StatusUnauthorized, "unauthorized") // 3: a refused one counts too
	msg := e.refused(request{bearer: tok, query: q("channel", "orders/1")}, http.StatusTooManyRequests, "too_many_requests")
	if !strings.Contains(msg, "too many connection attempts") {
		t.Fatalf("message %q", msg)
	}
	_, resp, err := e.tryDialWS(wstest.DialOpts{})
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("ws dial = %v, %+v; want 429", err, resp)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "2" {
		t.Fatalf("Retry-After %q, want 2 (one token at 0.5/s)", ra)
	}
	if n := e.counter(e.srv.metrics.limitRejections.WithLabelValues(limitConnectRate)); n != 2 {
		t.Fatalf("herald_limit_rejections_total{connect_rate} = %v", n)
	}
	// Other routes are not limited.
	if status, _, _ := e.get("/healthz"); status != http.StatusOK {
		t.Fatalf("/healthz = %d", status)
	}
}

func TestIPLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newIPLimiter(2, 2, 3)
	l.now = func() time.Time { return now }
	a := netip.MustParseAddr("10.0.0.1")
	for i := range 2 {
		if ok, _ := l.allow(a); !ok {
			t.Fatalf("attempt %d refused within the burst", i)
		}
	}
	ok, wait := l.allow(a)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("beyond the burst: %v, wait %s", ok, wait)
	}
	now = now.Add(500 * time.Millisecond)
	if ok, _ := l.allow(a); !ok {
		t.Fatal("refused after refilling one token")
	}
	// The map stays bounded: refilled buckets go first, then any.
	for i := range 10 {
		if ok, _ := l.allow(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})); !ok {
			t.Fatalf("new address %d refused", i)
		}
		if len(l.buckets) > 3 {
			t.Fatalf("%d buckets, bound 3", len(l.buckets))
		}
	}
}

func TestClientAddr(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:5000":             "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::",
		"[::ffff:192.0.2.9]:1":       "192.0.2.9",
		"[fe80::1%eth0]:80":          "fe80::",
		"not an address":             "",
	} {
		got, ok := clientAddr(&http.Request{RemoteAddr: remote})
		if (want == "") == ok || ok && got.String() != want {
			t.Errorf("clientAddr(%q) = %v, %v; want %q", remote, got, ok, want)
		}
	}
}
