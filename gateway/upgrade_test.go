package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// gathered reads one series of a registered metric by name and labels from
// the server's registry, as /metrics would show it; ok is false when the
// series is not exposed.
func (e *testEnv) gathered(name string, labels map[string]string) (float64, bool) {
	e.t.Helper()
	fams, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			}
		}
	}
	return 0, false
}

// refusals is herald_connect_refusals_total{transport,reason}, failing the
// test when the series is not exposed.
func (e *testEnv) refusals(transport, reason string) float64 {
	e.t.Helper()
	v, ok := e.gathered("herald_connect_refusals_total", map[string]string{"transport": transport, "reason": reason})
	if !ok {
		e.t.Fatalf("herald_connect_refusals_total{transport=%q,reason=%q} is not exposed", transport, reason)
	}
	return v
}

// refusedHandshake dials /v1/ws with o and requires a refusal before the
// upgrade with status and the JSON error code.
func (e *testEnv) refusedHandshake(o wstest.DialOpts, status int, code string) {
	e.t.Helper()
	c, resp, err := e.tryDialWS(o)
	if err == nil {
		c.Close()
		e.t.Fatalf("dial /v1/ws?%s: upgraded, want a %d %s refusal", o.Query, status, code)
	}
	if resp == nil || resp.StatusCode != status {
		e.t.Fatalf("dial /v1/ws?%s = %v, %+v; want status %d", o.Query, err, resp, status)
	}
	b, _ := io.ReadAll(resp.Body)
	var body errorBody
	if json.Unmarshal(b, &body) != nil || body.Error.Code != code || body.Error.Message == "" {
		e.t.Fatalf("body %s, want code %q and a message", b, code)
	}
}

// ticketStoreEnv is a gateway with a MemoryTickets the test can reach.
func ticketStoreEnv(t *testing.T, cfg Config) (*testEnv, *auth.MemoryTickets) {
	t.Helper()
	tickets, err := auth.NewMemoryTickets(auth.TicketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnectAttemptsPerIP == 0 {
		cfg.ConnectAttemptsPerIP = -1
	}
	return newEnv(t, envOptions{cfg: cfg, deps: func(d *Deps) { d.Tickets = tickets }}), tickets
}

// unspent requires the ticket to be still redeemable; redeeming it here
// uses it up.
func unspent(t *testing.T, tickets *auth.MemoryTickets, ticket, what string) {
	t.Helper()
	if _, err := tickets.Redeem(context.Background(), ticket); err != nil {
		t.Fatalf("%s: the ticket was spent: %v", what, err)
	}
}

// spent requires the ticket to be used up already.
func spent(t *testing.T, tickets *auth.MemoryTickets, ticket, what string) {
	t.Helper()
	if _, err := tickets.Redeem(context.Background(), ticket); err == nil {
		t.Fatalf("%s: the ticket is still redeemable", what)
	}
}

// TestWSMalformedUpgradeQuery: an upgrade whose query string does not
// parse is refused before the upgrade with 400 bad_request (never the
// reserved close code 4500), and is counted as a refusal.
func TestWSMalformedUpgradeQuery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{ConnectAttemptsPerIP: -1}})
	tok := e.wsToken("u1", []string{"orders/*"}, nil)
	e.refusedHandshake(wstest.DialOpts{Query: "x=%zz"}, http.StatusBadRequest, "bad_request")
	e.refusedHandshake(wstest.DialOpts{Query: "access_token=" + url.QueryEscape(tok) + "&since=%G0"},
		http.StatusBadRequest, "bad_request")
	if n := e.refusals(transportWS, session.ReasonBadRequest.Code); n != 2 {
		t.Fatalf("herald_connect_refusals_total{ws,bad_request} = %v, want 2", n)
	}
	if n := e.counter(e.srv.metrics.httpRequests.WithLabelValues("/v1/ws", "101")); n != 0 {
		t.Fatalf("herald_http_requests_total{/v1/ws,101} = %v: a malformed query was upgraded", n)
	}
	// A well-formed query with unknown parameters is fine.
	c := e.dialWS(wstest.DialOpts{Query: "future=1"})
	c.Connect(tok)
}

// TestWSUpgradeAuthBeforeUserLimit: an upgrade whose token verifies but
// is expired (within the verifier's leeway, past ExpiryGrace) or revoked
// is judged on that, not on MaxConnectionsPerUser: the connect reply says
// token_expired / revoked and the connection closes 4100 / 4505, where a
// 429 would send the client into a useless backoff.
func TestWSUpgradeAuthBeforeUserLimit(t *testing.T) {
	t.Parallel()
	revs := auth.NewMemoryRevocations()
	cfg := fastReval()
	cfg.MaxConnectionsPerUser = 1
	e := newEnv(t, envOptions{cfg: cfg, deps: func(d *Deps) {
		d.Verifier = auth.NewHMACVerifier(testSecret, time.Minute)
		d.Revocations = revs
	}})
	live, _ := mintSpec(t, tokenSpec{subscribe: []string{"orders/*"}})
	holder := e.dialWS(wstest.DialOpts{})
	holder.Connect(live) // u1 is now at its bound

	// Expired 20 s ago: it verifies (1 min leeway) but is past ExpiryGrace.
	expired := e.mint("u1", time.Now().Add(-20*time.Second), []string{"orders/*"}, nil)
	c := e.dialWS(wstest.DialOpts{Header: http.Header{"Authorization": {"Bearer " + expired}}})
	c.Fails(c.Request(ws.OpConnect, nil), ws.CodeTokenExpired)
	c.ClosedWith("token_expired", session.CloseTokenExpired)

	revokedTok, exp := mintSpec(t, tokenSpec{subscribe: []string{"orders/*"}, sid: "s-gone"})
	if err := revs.Revoke(context.Background(), auth.Revocation{SessionID: "s-gone", Until: exp}); err != nil {
		t.Fatal(err)
	}
	claims, err := e.srv.deps.Verifier.Verify(revokedTok)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the revocation snapshot", func() bool { return e.srv.reval.revoked(claims) })
	c = e.dialWS(wstest.DialOpts{Header: http.Header{"Authorization": {"Bearer " + revokedTok}}})
	c.Fails(c.Request(ws.OpConnect, nil), ws.CodeRevoked)
	c.ClosedWith("revoked", session.CloseRevoked)

	// A good token of the same user is still refused by the bound.
	e.refusedHandshake(wstest.DialOpts{Header: http.Header{"Authorization": {"Bearer " + live}}},
		http.StatusTooManyRequests, "too_many_connections")
	if n := e.counter(e.srv.metrics.limitRejections.WithLabelValues(limitUserConns)); n != 1 {
		t.Fatalf("herald_limit_rejections_total{connections_per_user} = %v, want 1 (the good token only)", n)
	}
	holder.Subscribe("orders/1", nil) // unharmed
}

// rawUpgrade sends a hand-made WebSocket handshake to /v1/ws?query with
// the given Sec-WebSocket-Version and returns the status.
func (e *testEnv) rawUpgrade(query, version string) int {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.base+"/v1/ws?"+query, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", version)
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	req.Header.Set("Sec-WebSocket-Protocol", ws.Protocol)
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestTicketNotSpentByRefusedUpgrade: a request refused for anything that
// does not depend on whose ticket it is (a malformed query, channel list,
// cursor or sub_token, a broken WebSocket handshake, the per-address
// attempt rate, the node's connection bound) leaves the ticket
// redeemable; a WebSocket spends its ticket only when connect relies on
// it.
func TestTicketNotSpentByRefusedUpgrade(t *testing.T) {
	t.Parallel()
	e, tickets := ticketStoreEnv(t, Config{MaxSubscriptions: 2})
	tok := e.token("acme", "u1", "orders/*")
	try := func(what string, refuse func(ticket string)) {
		t.Helper()
		tr := e.ticket(tok)
		refuse(tr.Ticket)
		unspent(t, tickets, tr.Ticket, what)
	}
	sse := func(status int, code string, kv ...string) func(string) {
		return func(ticket string) {
			e.refused(request{query: q(append(kv, "ticket", ticket)...)}, status, code)
		}
	}
	try("sse: no channel", sse(400, "bad_request"))
	try("sse: bad channel", sse(400, "bad_request", "channel", "orders//1"))
	try("sse: too many channels", sse(400, "bad_request", "channel", "orders/1", "channel", "orders/2", "channel", "orders/3"))
	try("sse: bad cursor", sse(400, "bad_request", "channel", "orders/1", "last_event_id", "AQ"))
	try("sse: bad sub_token", sse(400, "bad_request", "channel", "orders/1", "sub_token", "x"))
	try("sse: malformed query", func(ticket string) {
		e.refused(request{path: "/v1/sse?channel=orders/1&x=%zz&ticket=" + url.QueryEscape(ticket)}, 400, "bad_request")
	})
	try("ws: malformed query", func(ticket string) {
		e.refusedHandshake(wstest.DialOpts{Query: "ticket=" + url.QueryEscape(ticket) + "&x=%zz"}, 400, "bad_request")
	})
	try("ws: bad handshake", func(ticket string) {
		if status := e.rawUpgrade("ticket="+url.QueryEscape(ticket), "12"); status != http.StatusBadRequest {
			t.Fatalf("Sec-WebSocket-Version 12: status %d, want 400", status)
		}
	})
	try("ws: connect with its own token", func(ticket string) {
		c := e.dialWS(wstest.DialOpts{Query: "ticket=" + url.QueryEscape(ticket)})
		c.Connect(tok)
		c.Close()
	})
	try("ws: closed before connect", func(ticket string) {
		c := e.dialWS(wstest.DialOpts{Query: "ticket=" + url.QueryEscape(ticket)})
		c.OK(c.Request(ws.OpPing, nil), nil)
		c.Close()
	})
	if n := e.counter(e.srv.metrics.tickets.WithLabelValues(ticketRedeemed)); n != 0 {
		t.Fatalf("herald_tickets_total{redeemed} = %v, want 0", n)
	}

	// The per-address rate and the node bound refuse before anything else.
	limited, ltickets := ticketStoreEnv(t, Config{ConnectAttemptsPerIP: 0.001, ConnectAttemptsBurst: 1, MaxConnections: 1})
	ltok := limited.token("acme", "u1", "orders/*")
	first := limited.ticket(ltok) // takes the one attempt; tickets count against the rate
	limited.refused(request{query: q("channel", "orders/1", "ticket", first.Ticket)}, 429, "too_many_requests")
	limited.refusedHandshake(wstest.DialOpts{Query: "ticket=" + url.QueryEscape(first.Ticket)}, 429, "too_many_requests")
	unspent(t, ltickets, first.Ticket, "per-address rate")

	full, ftickets := ticketStoreEnv(t, Config{MaxConnections: 1})
	ftok := full.token("acme", "u1", "orders/*")
	full.stream(ftok, "orders/1")
	tr := full.ticket(ftok)
	full.refused(request{query: q("channel", "orders/1", "ticket", tr.Ticket)}, 503, "too_many_connections")
	full.refusedHandshake(wstest.DialOpts{Query: "ticket=" + url.QueryEscape(tr.Ticket)}, 503, "too_many_connections")
	unspent(t, ftickets, tr.Ticket, "node connection bound")
}

// TestTicketSpentByUserRefusal: refusals that depend on the ticket's user
// can only be decided after redeeming it (the ticket stores have no peek
// and no give-back), so they spend it; the WebSocket reports the per-user
// bound in the connect reply (close 4006), which browsers can read.
func TestTicketSpentByUserRefusal(t *testing.T) {
	t.Parallel()
	e, tickets := ticketStoreEnv(t, Config{MaxConnectionsPerUser: 1})
	tok := e.token("acme", "u1", "orders/*")
	e.stream(tok, "orders/1")

	tr := e.ticket(tok)
	e.refused(request{query: q("channel", "orders/1", "ticket", tr.Ticket)}, 429, "too_many_connections")
	spent(t, tickets, tr.Ticket, "sse at the per-user bound")

	tr = e.ticket(tok)
	c := e.dialWS(wstest.DialOpts{Query: "ticket=" + url.QueryEscape(tr.Ticket)})
	c.Fails(c.Request(ws.OpConnect, nil), ws.CodeTooManyConnections)
	c.ClosedWith("too_many_connections", session.CloseTooManyConnections)
	spent(t, tickets, tr.Ticket, "ws at the per-user bound")

	tr = e.ticket(tok)
	e.refused(request{query: q("channel", "users/u2", "ticket", tr.Ticket)}, 403, "forbidden")
	spent(t, tickets, tr.Ticket, "sse forbidden channel")
}

// TestConnectRefusalsCounted: every connection refused before its stream
// opened is counted in herald_connect_refusals_total with its transport
// and typed reason, and never in herald_connections_total or
// herald_disconnects_total; SSE's too-many-channels refusal counts as a
// subscriptions limit rejection, as the WebSocket's does.
func TestConnectRefusalsCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{MaxConnectionsPerUser: 1, MaxSubscriptions: 1, ConnectAttemptsPerIP: -1}})
	tok := e.token("acme", "u1", "**")
	other := e.token("acme", "u2", "**")
	expired := e.tokenExp("acme", "u3", time.Now().Add(-time.Minute), "**")
	holder := e.stream(tok, "orders/1")

	// SSE.
	e.refused(request{query: q("channel", "orders/1")}, 401, "unauthorized")
	e.refused(request{query: q("channel", "orders/1"), bearer: expired}, 401, "token_expired")
	e.refused(request{query: q("channel", "orders/1"), bearer: tok}, 429, "too_many_connections")
	e.refused(request{query: q("channel", "a", "channel", "b"), bearer: other}, 400, "bad_request")
	// An EventSource with an expired token gets a reauth stream: refused too.
	resp := e.eventSourceGet(t, q("channel", "orders/1", "access_token", expired))
	es := newSSEStream(resp, func() {})
	t.Cleanup(es.close)
	es.next(t, 5*time.Second) // retry
	es.reauthEvent(t)
	es.control(t, "disconnect")
	es.waitEOF(t)

	// WebSocket: before the upgrade, and at connect.
	e.refusedHandshake(wstest.DialOpts{Subprotocols: []string{}}, 400, "bad_request")
	e.refusedHandshake(wstest.DialOpts{Header: http.Header{"Authorization": {"Bearer " + tok}}}, 429, "too_many_connections")
	c := e.dialWS(wstest.DialOpts{})
	c.Fails(c.Request(ws.OpConnect, map[string]any{"token": "not-a-jwt"}), ws.CodeUnauthorized)
	c.ClosedWith("unauthorized", session.CloseUnauthorized)
	c = e.dialWS(wstest.DialOpts{})
	c.Fails(c.Request(ws.OpConnect, map[string]any{"token": tok}), ws.CodeTooManyConnections)
	c.ClosedWith("too_many_connections", session.CloseTooManyConnections)
	c = e.dialWS(wstest.DialOpts{})
	c.Request(ws.OpSubscribe, map[string]any{"channel": "orders/1"})
	c.ClosedWith("protocol_error", session.CloseProtocolError)
	// A client that leaves before connect was not refused.
	c = e.dialWS(wstest.DialOpts{})
	c.OK(c.Request(ws.OpPing, nil), nil)
	c.Close()

	want := map[[2]string]float64{
		{transportSSE, "unauthorized"}:         1,
		{transportSSE, "token_expired"}:        2,
		{transportSSE, "too_many_connections"}: 1,
		{transportSSE, "bad_request"}:          1,
		{transportWS, "bad_request"}:           1,
		{transportWS, "too_many_connections"}:  2,
		{transportWS, "unauthorized"}:          1,
		{transportWS, "protocol_error"}:        1,
		{transportWS, "client_closed"}:         0,
	}
	// The WebSocket refusals after the upgrade are counted when their
	// handlers end, after the client saw the close.
	mismatch := func() string {
		for k, n := range want {
			if got := e.refusals(k[0], k[1]); got != n {
				return fmt.Sprintf("herald_connect_refusals_total{%s,%s} = %v, want %v", k[0], k[1], got, n)
			}
		}
		return ""
	}
	for deadline := time.Now().Add(5 * time.Second); mismatch() != "" || e.srv.slots.Load() != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: %s; slots %d", mismatch(), e.srv.slots.Load())
		}
		time.Sleep(5 * time.Millisecond) // polling, not an assertion
	}
	if n := e.counter(e.srv.metrics.httpRequests.WithLabelValues("/v1/ws", "101")); n != 4 {
		t.Errorf("herald_http_requests_total{/v1/ws,101} = %v, want 4", n)
	}
	for _, tr := range []string{transportSSE, transportWS} {
		for _, r := range session.Reasons {
			if n := e.counter(e.srv.metrics.disconnects.WithLabelValues(tr, r.Code)); n != 0 {
				t.Errorf("herald_disconnects_total{%s,%s} = %v: a refusal counted as a disconnect", tr, r.Code, n)
			}
		}
	}
	if n := e.counter(e.srv.metrics.connectionsTotal.WithLabelValues(transportWS)); n != 0 {
		t.Errorf("herald_connections_total{ws} = %v, want 0", n)
	}
	if n := e.counter(e.srv.metrics.limitRejections.WithLabelValues(session.LimitSubscriptions)); n != 1 {
		t.Errorf("herald_limit_rejections_total{subscriptions} = %v, want 1 (the SSE request naming 2 channels)", n)
	}
	holder.close()
}

// TestConnectRefusalsRate: the per-address attempt limit counts as a
// refusal of the transport it refused, and not at all on /v1/tickets.
func TestConnectRefusalsRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{ConnectAttemptsPerIP: 0.001, ConnectAttemptsBurst: 1}})
	e.refused(request{query: q("channel", "orders/1")}, 401, "unauthorized") // the one attempt
	e.refused(request{query: q("channel", "orders/1")}, 429, "too_many_requests")
	e.refusedHandshake(wstest.DialOpts{}, 429, "too_many_requests")
	if status, _ := e.postTicket(e.token("acme", "u1"), "", ""); status != 404 && status != 429 {
		t.Fatalf("POST /v1/tickets: %d", status)
	}
	if n := e.refusals(transportSSE, "too_many_requests"); n != 1 {
		t.Errorf("herald_connect_refusals_total{sse,too_many_requests} = %v, want 1", n)
	}
	if n := e.refusals(transportWS, "too_many_requests"); n != 1 {
		t.Errorf("herald_connect_refusals_total{ws,too_many_requests} = %v, want 1", n)
	}
	if !strings.Contains(e.logs.String(), "too_many_requests") {
		t.Errorf("refusals are not logged")
	}
}
