package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// testTrusted is the proxy set of the resolution tests.
var testTrusted = newTrustedProxies([]netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.1/32"),
	netip.MustParsePrefix("2001:db8:ffff::/48"),
})

func TestResolveClient(t *testing.T) {
	const proxy = "10.0.0.1:5000" // a trusted peer
	cases := []struct {
		name       string
		peer       string
		fwd, xff   []string
		addr, logs string // want; addr "" = no address
	}{
		// The peer is not trusted: the headers are never read.
		{name: "untrusted, no headers", peer: "192.0.2.1:1234", addr: "192.0.2.1", logs: "192.0.2.1:1234"},
		{name: "untrusted, xff", peer: "192.0.2.1:1234", xff: []string{"203.0.113.5"}, addr: "192.0.2.1", logs: "192.0.2.1:1234"},
		{name: "untrusted, forwarded", peer: "192.0.2.1:1234", fwd: []string{"for=203.0.113.5"}, addr: "192.0.2.1", logs: "192.0.2.1:1234"},
		{name: "untrusted ipv6 peer", peer: "[2001:db8::7]:443", xff: []string{"203.0.113.5"}, addr: "2001:db8::7", logs: "[2001:db8::7]:443"},
		{name: "peer not an IP", peer: "@", xff: []string{"203.0.113.5"}, addr: "", logs: "@"},
		{name: "peer without port", peer: "192.0.2.1", addr: "192.0.2.1", logs: "192.0.2.1"},

		// A trusted peer without headers is the client.
		{name: "trusted, no headers", peer: proxy, addr: "10.0.0.1", logs: proxy},
		{name: "trusted mapped peer", peer: "[::ffff:10.0.0.1]:80", xff: []string{"203.0.113.5"}, addr: "203.0.113.5", logs: "203.0.113.5"},
		{name: "trusted ipv6 peer", peer: "[2001:db8:ffff::1]:443", xff: []string{"2001:db8::1"}, addr: "2001:db8::1", logs: "2001:db8::1"},

		// X-Forwarded-For.
		{name: "xff one hop", peer: proxy, xff: []string{"203.0.113.5"}, addr: "203.0.113.5", logs: "203.0.113.5"},
		{name: "xff spoofed left", peer: proxy, xff: []string{"6.6.6.6, 203.0.113.5"}, addr: "203.0.113.5", logs: "203.0.113.5"},
		{name: "xff spoofed trusted left", peer: proxy, xff: []string{"10.9.9.9, 203.0.113.5"}, addr: "203.0.113.5", logs: "203.0.113.5"},
		{name: "xff trusted hops skipped", peer: proxy, xff: []string{"6.6.6.6, 203.0.113.5, 10.0.0.2, 127.0.0.1"}, addr: "203.0.113.5", logs: "203.0.113.5"},
		{name: "xff lines", peer: proxy, xff: []string{"6.6.6.6", "203.0.113.5, 10.0.0.2"}, addr: "203.0.113.5", logs: "203.0.113.5"},
		{name: "xff client in first line", peer: proxy, xff: []string{"203.0.113.5", "10.0.0.2", "10.0.0.3"}, addr: "203.0.113.5", logs: "203.0.113.5"},
		{name: "xff all trusted: leftmost", peer: proxy, xff: []string{"10.0.0.5, 10.0.0.6"}, addr: "10.0.0.5", logs: "10.0.0.5"},
		{name: "xff empty elements", peer: proxy, xff: []string{" ,203.0.113.5,, \t,"}, addr: "203.0.113.5", logs: "203.0.113.5"},
		{name: "xff empty", peer: proxy, xff: []string{""}, addr: "10.0.0.1", logs: proxy},
		{name: "xff ipv4 port", peer: proxy, xff: []string{"203.0.113.5:8080"}, addr: "203.0.113.5", logs: "203.0.113.5:8080"},
		{name: "xff bare ipv6", peer: proxy, xff: []string{"2001:db8::1"}, addr: "2001:db8::1", logs: "2001:db8::1"},
		{name: "xff bracketed ipv6 port", peer: proxy, xff: []string{"[2001:db8::1]:4711"}, addr: "2001:db8::1", logs: "[2001:db8::1]:4711"},
		{name: "xff zone dropped", peer: proxy, xff: []string{"fe80::1%eth0"}, addr: "fe80::1", logs: "fe80::1"},
		{name: "xff mapped", peer: proxy, xff: []string{"::ffff:203.0.113.5"}, addr: "203.0.113.5", logs: "203.0.113.5"},
		{name: "xff garbage last: the peer", peer: proxy, xff: []string{"203.0.113.5, garbage"}, addr: "10.0.0.1", logs: proxy},
		{name: "xff garbage mid: last good", peer: proxy, xff: []string{"203.0.113.5, garbage, 10.0.0.2"}, addr: "10.0.0.2", logs: "10.0.0.2"},
		{name: "xff garbage beyond client", peer: proxy, xff: []string{"garbage, 203.0.113.5"}, addr: "203.0.113.5", logs: "203.0.113.5"},
		{name: "xff unknown", peer: proxy, xff: []string{"unknown"}, addr: "10.0.0.1", logs: proxy},
		{name: "xff port too big", peer: proxy, xff: []string{"203.0.113.5:70000"}, addr: "10.0.0.1", logs: proxy},
		{name: "xff empty port", peer: proxy, xff: []string{"203.0.113.5:"}, addr: "10.0.0.1", logs: proxy},
		{name: "xff ipv4 in brackets", peer: proxy, xff: []string{"[203.0.113.5]"}, addr: "10.0.0.1", logs: proxy},
		{name: "xff quote does not swallow", peer: proxy, xff: []string{`"6.6.6.6, 203.0.113.5`}, addr: "203.0.113.5", logs: "203.0.113.5"},
		{name: "xff hostname", peer: proxy, xff: []string{"client.example.com"}, addr: "10.0.0.1", logs: proxy},

		// Forwarded.
		{name: "fwd rfc example", peer: proxy, fwd: []string{"for=192.0.2.60;proto=http;by=203.0.113.43"}, addr: "192.0.2.60", logs: "192.0.2.60"},
		{name: "fwd ipv6 port", peer: proxy, fwd: []string{`for="[2001:db8:cafe::17]:4711"`}, addr: "2001:db8:cafe::17", logs: "[2001:db8:cafe::17]:4711"},
		{name: "fwd ipv6 no port", peer: proxy, fwd: []string{`For="[2001:db8:cafe::17]"`}, addr: "2001:db8:cafe::17", logs: "2001:db8:cafe::17"},
		{name: "fwd ipv4 port", peer: proxy, fwd: []string{`for="192.0.2.43:47011"`}, addr: "192.0.2.43", logs: "192.0.2.43:47011"},
		{name: "fwd obfuscated port", peer: proxy, fwd: []string{`for="192.0.2.43:_p1"`}, addr: "192.0.2.43", logs: "192.0.2.43"},
		{name: "fwd list", peer: proxy, fwd: []string{"for=192.0.2.43, for=198.51.100.17"}, addr: "198.51.100.17", logs: "198.51.100.17"},
		{name: "fwd spoofed left, trusted right", peer: proxy, fwd: []string{"for=6.6.6.6, for=198.51.100.17;by=10.0.0.1, for=10.0.0.9;proto=https"}, addr: "198.51.100.17", logs: "198.51.100.17"},
		{name: "fwd lines", peer: proxy, fwd: []string{"for=6.6.6.6", "for=198.51.100.17", "for=10.0.0.9"}, addr: "198.51.100.17", logs: "198.51.100.17"},
		{name: "fwd unknown: the peer", peer: proxy, fwd: []string{"for=192.0.2.43, for=unknown"}, addr: "10.0.0.1", logs: proxy},
		{name: "fwd obfuscated: last good", peer: proxy, fwd: []string{"for=192.0.2.43, for=_hidden, for=10.0.0.2"}, addr: "10.0.0.2", logs: "10.0.0.2"},
		{name: "fwd quoted comma", peer: proxy, fwd: []string{`for="6.6.6.6,1.2.3.4", for=198.51.100.17`}, addr: "198.51.100.17", logs: "198.51.100.17"},
		{name: "fwd quoted semicolon: malformed", peer: proxy, fwd: []string{`for=198.51.100.17, for="10.0.0.2;x"`}, addr: "10.0.0.1", logs: proxy},
		{name: "fwd quote left open in own line", peer: proxy, fwd: []string{`for="6.6.6.6`, "for=198.51.100.17"}, addr: "198.51.100.17", logs: "198.51.100.17"},
		{name: "fwd quote left open in same line", peer: proxy, fwd: []string{`for="6.6.6.6, for=198.51.100.17`}, addr: "10.0.0.1", logs: proxy},
		{name: "fwd quoted-pair", peer: proxy, fwd: []string{`for="\[2001:db8::1\]:4711"`}, addr: "2001:db8::1", logs: "[2001:db8::1]:4711"},
		{name: "fwd mapped", peer: proxy, fwd: []string{`for="[::ffff:192.0.2.1]"`}, addr: "192.0.2.1", logs: "192.0.2.1"},
		{name: "fwd ipv4 in brackets", peer: proxy, fwd: []string{`for="[192.0.2.1]"`}, addr: "10.0.0.1", logs: proxy},
		{name: "fwd no for", peer: proxy, fwd: []string{"proto=https;host=example.com"}, addr: "10.0.0.1", logs: proxy},
		{name: "fwd for twice", peer: proxy, fwd: []string{"for=192.0.2.1;for=192.0.2.2"}, addr: "10.0.0.1", logs: proxy},
		{name: "fwd empty value", peer: proxy, fwd: []string{`for=""`}, addr: "10.0.0.1", logs: proxy},
		{name: "fwd bad name", peer: proxy, fwd: []string{"f(r=192.0.2.1"}, addr: "10.0.0.1", logs: proxy},
		{name: "fwd trailing semicolon", peer: proxy, fwd: []string{"for=192.0.2.1;"}, addr: "192.0.2.1", logs: "192.0.2.1"},
		{name: "fwd unquoted ipv6 port", peer: proxy, fwd: []string{"for=[2001:db8::1]:80"}, addr: "2001:db8::1", logs: "[2001:db8::1]:80"},
		{name: "fwd junk after quote", peer: proxy, fwd: []string{`for="192.0.2.1"x`}, addr: "10.0.0.1", logs: proxy},

		// Both headers: Forwarded wins, when it holds anything.
		{name: "mixed: forwarded wins", peer: proxy, fwd: []string{"for=192.0.2.43"}, xff: []string{"203.0.113.5"}, addr: "192.0.2.43", logs: "192.0.2.43"},
		{name: "mixed: broken forwarded still wins", peer: proxy, fwd: []string{"for=unknown"}, xff: []string{"203.0.113.5"}, addr: "10.0.0.1", logs: proxy},
		{name: "mixed: blank forwarded", peer: proxy, fwd: []string{" "}, xff: []string{"203.0.113.5"}, addr: "203.0.113.5", logs: "203.0.113.5"},
		{name: "mixed: untrusted peer", peer: "192.0.2.1:1", fwd: []string{"for=192.0.2.43"}, xff: []string{"203.0.113.5"}, addr: "192.0.2.1", logs: "192.0.2.1:1"},

		// At most maxForwardedHops hops are read.
		{name: "hop bound", peer: proxy, xff: []string{"203.0.113.5" + strings.Repeat(", 10.0.0.7", maxForwardedHops)}, addr: "10.0.0.7", logs: "10.0.0.7"},
		{name: "hop bound across lines", peer: proxy, xff: append([]string{"203.0.113.5"}, strings.Split(strings.Repeat("10.0.0.7,", maxForwardedHops-1)+"10.0.0.7", ",")...), addr: "10.0.0.7", logs: "10.0.0.7"},
		{name: "within the hop bound", peer: proxy, xff: []string{"203.0.113.5" + strings.Repeat(", 10.0.0.7", maxForwardedHops-1)}, addr: "203.0.113.5", logs: "203.0.113.5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range c.fwd {
				h.Add("Forwarded", v)
			}
			for _, v := range c.xff {
				h.Add("X-Forwarded-For", v)
			}
			got := resolveClient(c.peer, h, testTrusted)
			want := netip.Addr{}
			if c.addr != "" {
				want = netip.MustParseAddr(c.addr)
			}
			if got.addr != want || got.remote != c.logs {
				t.Fatalf("resolveClient(%q, %q) = %v %q; want %v %q", c.peer, h, got.addr, got.remote, want, c.logs)
			}
		})
	}
}

func TestTrustedProxiesNormalized(t *testing.T) {
	tp := newTrustedProxies([]netip.Prefix{
		netip.MustParsePrefix("::ffff:192.168.0.0/112"), // IPv4-mapped: matches the unmapped address
		netip.MustParsePrefix("172.16.9.9/12"),          // host bits ignored
	})
	for addr, want := range map[string]bool{
		"192.168.3.4": true, "192.169.0.1": false, "172.31.0.1": true, "172.32.0.1": false, "::1": false,
	} {
		if got := tp.contains(netip.MustParseAddr(addr)); got != want {
			t.Errorf("contains(%s) = %v, want %v", addr, got, want)
		}
	}
	if (trustedProxies)(nil).contains(netip.MustParseAddr("127.0.0.1")) {
		t.Error("an empty set trusts 127.0.0.1")
	}
}

// TestClientOfRequest: the limiter key comes from the resolved client,
// IPv6 still masked to /64; a request that did not pass withClient is its
// peer.
func TestClientOfRequest(t *testing.T) {
	s := &Server{trusted: testTrusted}
	var got client
	var key netip.Addr
	h := s.withClient(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = clientOf(r)
		key, _ = clientAddr(r)
		if r.RemoteAddr != "10.0.0.1:5000" {
			t.Errorf("RemoteAddr changed to %q", r.RemoteAddr)
		}
	}))
	r := &http.Request{RemoteAddr: "10.0.0.1:5000", Header: http.Header{"X-Forwarded-For": {"2001:db8:1:2:3:4:5:6"}}}
	h.ServeHTTP(nil, r)
	if got.addr != netip.MustParseAddr("2001:db8:1:2:3:4:5:6") || key != netip.MustParseAddr("2001:db8:1:2::") {
		t.Fatalf("client %v, key %v", got.addr, key)
	}
	if c := clientOf(r); c.addr != netip.MustParseAddr("10.0.0.1") || c.remote != "10.0.0.1:5000" {
		t.Fatalf("outside withClient: %+v", c)
	}
}

// FuzzClientAddr: whatever the headers hold, resolution does not panic, a
// peer that is not trusted is always the client, and a trusted peer
// always yields an address.
func FuzzClientAddr(f *testing.F) {
	peers := []string{"192.0.2.1:1234", "10.0.0.1:5000", "[2001:db8:ffff::1]:443", "127.0.0.1:80", "[2001:db8::9]:1", "@"}
	for _, s := range []struct{ fwd, xff string }{
		{"", "203.0.113.5"},
		{"", "6.6.6.6, 203.0.113.5, 10.0.0.2"},
		{"for=192.0.2.60;proto=http;by=203.0.113.43", ""},
		{`for="[2001:db8:cafe::17]:4711", for=10.0.0.3`, "203.0.113.5"},
		{`for="6.6.6.6, for=_x, for=unknown`, ""},
		{`for="\\`, "[::1]:"},
		{";;==,,\"\"", "[,]:,::ffff:1.2.3.4"},
	} {
		for i := range peers {
			f.Add(uint8(i), s.fwd, s.xff)
		}
	}
	f.Fuzz(func(t *testing.T, peerIdx uint8, fwd, xff string) {
		peer := peers[int(peerIdx)%len(peers)]
		h := http.Header{}
		// Several header lines, split where the input has newlines.
		if fwd != "" {
			for v := range strings.SplitSeq(fwd, "\n") {
				h.Add("Forwarded", v)
			}
		}
		if xff != "" {
			for v := range strings.SplitSeq(xff, "\n") {
				h.Add("X-Forwarded-For", v)
			}
		}
		got := resolveClient(peer, h, testTrusted)
		alone := resolveClient(peer, nil, testTrusted)
		if !alone.addr.IsValid() || !testTrusted.contains(alone.addr) {
			if got != alone {
				t.Fatalf("untrusted peer %q with Forwarded %q, X-Forwarded-For %q resolved to %+v", peer, fwd, xff, got)
			}
			return
		}
		if !got.addr.IsValid() || got.remote == "" {
			t.Fatalf("trusted peer %q with Forwarded %q, X-Forwarded-For %q resolved to %+v", peer, fwd, xff, got)
		}
		if got.addr != got.addr.Unmap().WithZone("") {
			t.Fatalf("resolved %v: mapped or zoned", got.addr)
		}
	})
}

// TestTrustedProxiesLimitPerClient: through the real server, with the
// peer (127.0.0.1) trusted, clients that X-Forwarded-For or Forwarded tell
// apart have connection-attempt buckets of their own, keyed by the
// rightmost untrusted hop (a spoofed left entry changes nothing), and are
// logged by their own address.
func TestTrustedProxiesLimitPerClient(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{
		ConnectAttemptsPerIP: 0.001, ConnectAttemptsBurst: 1,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
	}})
	tok := e.token("acme", "u1", "orders/*")

	// A stream and a WebSocket are logged with their client's address.
	resp, cancel := e.doWith(request{bearer: tok, query: q("channel", "orders/1")}, "X-Forwarded-For", "203.0.113.77")
	if resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	s := newSSEStream(resp, cancel)
	t.Cleanup(s.close)
	s.next(t, 5*time.Second)
	waitLog(t, e, "gateway: connection opened", "remote=203.0.113.77")
	hdr := http.Header{"X-Forwarded-For": {"203.0.113.50"}}
	e.dialWS(wstest.DialOpts{Header: hdr}).Connect(tok)
	waitLog(t, e, "gateway: connection opened", "remote=203.0.113.50")
	// That client's second attempt is limited.
	if _, resp, err := e.tryDialWS(wstest.DialOpts{Header: hdr}); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second ws dial of 203.0.113.50 = %v, %v; want 429", err, resp)
	}
	waitLog(t, e, "gateway: request refused", "remote=203.0.113.50")

	// Forwarded, IPv6 with a port: one /64 shares a bucket.
	if code := e.attempt("Forwarded", `for="[2001:db8:1:2::1]:4711"`); code != http.StatusUnauthorized {
		t.Fatalf("first 2001:db8:1:2::1: %d", code)
	}
	waitLog(t, e, "gateway: request refused", "remote=[2001:db8:1:2::1]:4711")
	if code := e.attempt("Forwarded", `for="[2001:db8:1:2::99]"`, "X-Forwarded-For", "198.51.100.200"); code != http.StatusTooManyRequests {
		t.Fatalf("second address of the same /64: %d, want 429", code)
	}

	// 130 distinct clients behind the proxy, as in the nginx report: none
	// is limited.
	for i := range 130 {
		xff := fmt.Sprintf("198.51.100.%d, 127.0.0.1", i)
		if code := e.attempt("X-Forwarded-For", xff); code != http.StatusUnauthorized {
			t.Fatalf("client %d: status %d, want 401 (refused by the token, not the limiter)", i, code)
		}
	}
	// One client's second attempt is limited, however it spoofs the left.
	if code := e.attempt("X-Forwarded-For", "6.6.6.6, 198.51.100.7"); code != http.StatusTooManyRequests {
		t.Fatalf("second attempt of 198.51.100.7: %d, want 429", code)
	}
	// The proxy itself, without headers, has a bucket of its own.
	if code := e.attempt(); code != http.StatusUnauthorized {
		t.Fatalf("the proxy's own attempt: %d", code)
	}
	if code := e.attempt(); code != http.StatusTooManyRequests {
		t.Fatalf("the proxy's second attempt: %d, want 429", code)
	}
}

// TestUntrustedPeerCannotSpoof: a peer that is not a trusted proxy is
// limited as itself, whatever X-Forwarded-For or Forwarded claim.
func TestUntrustedPeerCannotSpoof(t *testing.T) {
	e := newEnv(t, envOptions{cfg: Config{
		ConnectAttemptsPerIP: 0.001, ConnectAttemptsBurst: 2,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")},
	}})
	if code := e.attempt("X-Forwarded-For", "198.51.100.1"); code != http.StatusUnauthorized {
		t.Fatalf("first attempt: %d", code)
	}
	if code := e.attempt("Forwarded", "for=198.51.100.2"); code != http.StatusUnauthorized {
		t.Fatalf("second attempt: %d", code)
	}
	if code := e.attempt("X-Forwarded-For", "198.51.100.3"); code != http.StatusTooManyRequests {
		t.Fatalf("third attempt with a new X-Forwarded-For: %d, want 429 (limited as 127.0.0.1)", code)
	}
	if _, resp, err := e.tryDialWS(wstest.DialOpts{Header: http.Header{"X-Forwarded-For": {"198.51.100.4"}}}); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("ws dial with a new X-Forwarded-For = %v, %v; want 429", err, resp)
	}
	waitLog(t, e, "gateway: request refused", "remote=127.0.0.1:")
	if logs := e.logs.String(); strings.Contains(logs, "198.51.100.") {
		t.Fatalf("a spoofed address reached the logs:\n%s", logs)
	}
}

// attempt sends GET /v1/sse with a bad bearer token and header pairs,
// and returns the status.
func (e *testEnv) attempt(headers ...string) int {
	e.t.Helper()
	resp, cancel := e.doWith(request{bearer: "bad"}, headers...)
	defer cancel()
	resp.Body.Close()
	return resp.StatusCode
}

// doWith is do (on /v1/sse by default) with extra header pairs.
func (e *testEnv) doWith(r request, headers ...string) (*http.Response, context.CancelFunc) {
	e.t.Helper()
	if r.path == "" {
		r.path = "/v1/sse"
	}
	r.headers = headers
	return e.do(r)
}

// waitLog waits up to 5s for a line of the server's logs holding msg and
// attr.
func waitLog(t *testing.T, e *testEnv, msg, attr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for line := range strings.SplitSeq(e.logs.String(), "\n") {
			if strings.Contains(line, msg) && strings.Contains(line, attr) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line holds %q and %q:\n%s", msg, attr, e.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
