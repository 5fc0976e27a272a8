package gateway

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// TestTokensNeverLogged drives every path that takes a credential — good
// and bad tokens in the header, the cookie and the URL, tickets, replays,
// subscription tokens, WebSocket connect and refresh — with the logger at
// debug, then checks that no token, ticket or subscription token appears
// in the logs or in /metrics.
func TestTokensNeverLogged(t *testing.T) {
	t.Parallel()
	tickets, err := auth.NewMemoryTickets(auth.TicketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e := hookEnv(t, "", func(d *Deps) { d.Tickets = tickets })
	var secrets []string
	keep := func(s string) string { secrets = append(secrets, s); return s }

	tok := keep(e.token("acme", "u1", "orders/*"))
	expired := keep(e.tokenExp("acme", "u1", time.Now().Add(-time.Minute), "orders/*"))
	forged, err := mintWith([]byte("another secret"), "acme")
	if err != nil {
		t.Fatal(err)
	}
	keep(forged)
	sub, _ := mintSubToken(t, "u1", "docs/1", time.Hour)
	keep(sub)

	e.stream(tok, "orders/1")
	s := e.open(request{query: url.Values{"channel": {"orders/1"}, "access_token": {tok}}})
	s.next(t, 5*time.Second)
	e.open(request{cookie: tok, query: url.Values{"channel": {"docs/1"}, "sub_token": {sub}}}).next(t, 5*time.Second)
	e.refused(request{query: url.Values{"channel": {"orders/1"}, "access_token": {forged}}}, 401, "unauthorized")
	e.refused(request{query: url.Values{"channel": {"orders/1"}, "access_token": {expired}}}, 401, "token_expired")
	e.refused(request{query: url.Values{"channel": {"users/x"}, "access_token": {tok}}}, 403, "forbidden")
	e.refused(request{query: url.Values{"channel": {"bad channel"}, "access_token": {tok}, "sub_token": {sub}}}, 400, "bad_request")
	e.refused(request{bearer: tok, query: url.Values{"channel": {"docs/2"}, "sub_token": {sub}}}, 400, "bad_request")

	tr := e.ticket(tok)
	keep(tr.Ticket)
	e.open(request{query: url.Values{"channel": {"orders/1"}, "ticket": {tr.Ticket}}}).next(t, 5*time.Second)
	e.refused(request{query: url.Values{"channel": {"orders/1"}, "ticket": {tr.Ticket}}}, 401, "unauthorized")
	e.postTicket(forged, "", "")
	e.postTicket("", "", "access_token="+url.QueryEscape(tok))

	c := e.dialWS(wstest.DialOpts{Query: "access_token=" + url.QueryEscape(tok)})
	c.Connect("")
	c.Fails(c.Request(ws.OpRefresh, map[string]any{"token": forged}), ws.CodeUnauthorized)
	c.Fails(c.Request(ws.OpSubscribe, map[string]any{"channel": "docs/9", "token": sub}), ws.CodeForbidden)
	bad := e.dialWS(wstest.DialOpts{Query: "access_token=" + url.QueryEscape(forged)})
	bad.Fails(bad.Request(ws.OpConnect, nil), ws.CodeUnauthorized)
	bad.Closed()
	c.Close()

	_, _, metrics := e.get("/metrics")
	eventually(t, 5*time.Second, "the logs to record the closed connections", func() bool {
		return strings.Contains(e.logs.String(), "connection closed")
	})
	logs := e.logs.String()
	for _, s := range secrets {
		sig := s[strings.LastIndexByte(s, '.')+1:]
		for what, text := range map[string]string{"logs": logs, "metrics": metrics} {
			if strings.Contains(text, s) || strings.Contains(text, sig) {
				t.Errorf("a secret (%s…) appears in the %s", s[:12], what)
			}
		}
	}
	if !strings.Contains(logs, "REDACTED") {
		t.Errorf("no redacted URL logged; the test did not exercise the URL logging:\n%s", logs)
	}
}
