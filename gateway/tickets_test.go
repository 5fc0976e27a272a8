package gateway

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/internal/testenv"
)

// testClock is a settable clock for ticket stores.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// postTicket does POST /v1/tickets (rawQuery appended when set) with a
// bearer token or a cookie.
func (e *testEnv) postTicket(bearer, cookie, rawQuery string) (int, []byte) {
	e.t.Helper()
	u := e.base + "/v1/tickets"
	if rawQuery != "" {
		u += "?" + rawQuery
	}
	req, err := http.NewRequest(http.MethodPost, u, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: DefaultCookieName, Value: cookie})
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		e.t.Fatalf("POST /v1/tickets: Content-Type %q", ct)
	}
	return resp.StatusCode, b
}

// ticket issues a ticket for bearer, which must succeed.
func (e *testEnv) ticket(bearer string) ticketResponse {
	e.t.Helper()
	status, body := e.postTicket(bearer, "", "")
	if status != 200 {
		e.t.Fatalf("POST /v1/tickets: %d %s", status, body)
	}
	var tr ticketResponse
	if err := json.Unmarshal(body, &tr); err != nil {
		e.t.Fatal(err)
	}
	return tr
}

func ticketEnv(t *testing.T) (*testEnv, *testClock) {
	t.Helper()
	clock := &testClock{t: time.Now()}
	tickets, err := auth.NewMemoryTickets(auth.TicketConfig{Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{cfg: Config{ConnectAttemptsPerIP: -1}, deps: func(d *Deps) { d.Tickets = tickets }})
	return e, clock
}

func TestTicketIssueAndRedeemSSE(t *testing.T) {
	t.Parallel()
	e, clock := ticketEnv(t)
	tok := e.token("acme", "u1", "orders/*")
	tr := e.ticket(tok)
	if len(tr.Ticket) != 43 || tr.ExpiresIn != 30 {
		t.Fatalf("ticket %+v, want 43 characters and expires_in 30", tr)
	}
	s := e.open(request{query: url.Values{"channel": {"orders/1"}, "ticket": {tr.Ticket}}})
	s.next(t, 5*time.Second)
	s.subscribed(t)
	pub := e.publish("acme", "orders/1", `1`)
	if _, p := s.publication(t); p.Offset != pub.Offset {
		t.Fatalf("got %+v", p)
	}
	// Single use: a replay is refused, as EventSource's own reconnect
	// would be (the client fetches a new ticket).
	msg := e.refused(request{query: url.Values{"channel": {"orders/1"}, "ticket": {tr.Ticket}}}, 401, "unauthorized")
	if !strings.Contains(msg, "single-use") {
		t.Fatalf("message %q", msg)
	}
	// EventSource's reconnect with the used ticket gets reauth, not 401.
	resp := e.eventSourceGet(t, url.Values{"channel": {"orders/1"}, "ticket": {tr.Ticket}})
	if resp.StatusCode != 200 {
		t.Fatalf("EventSource replay: status %d", resp.StatusCode)
	}
	es := newSSEStream(resp, func() {})
	t.Cleanup(es.close)
	es.next(t, 5*time.Second)
	if r := es.reauthEvent(t); r.Reason != "token_expired" || !strings.Contains(r.Message, "single-use") {
		t.Fatalf("reauth = %+v", r)
	}
	es.control(t, "disconnect")
	es.waitEOF(t)
	// The ticket is bound to the token's tenant and grants.
	tr = e.ticket(tok)
	e.refused(request{query: url.Values{"channel": {"users/u2"}, "ticket": {tr.Ticket}}}, 403, "forbidden")
	// An expired ticket is refused.
	tr = e.ticket(tok)
	clock.advance(31 * time.Second)
	e.refused(request{query: url.Values{"channel": {"orders/1"}, "ticket": {tr.Ticket}}}, 401, "unauthorized")
	if n := e.counter(e.srv.metrics.tickets.WithLabelValues(ticketIssued)); n != 3 {
		t.Fatalf("herald_tickets_total{issued} = %v", n)
	}
	if n := e.counter(e.srv.metrics.tickets.WithLabelValues(ticketInvalid)); n != 3 {
		t.Fatalf("herald_tickets_total{invalid} = %v", n)
	}
}

func TestTicketRedeemWS(t *testing.T) {
	t.Parallel()
	e, _ := ticketEnv(t)
	tok := e.token("acme", "u1", "orders/*")
	tr := e.ticket(tok)
	c := e.dialWS(wstest.DialOpts{Query: "ticket=" + url.QueryEscape(tr.Ticket)})
	c.Connect("")
	c.Subscribe("orders/1", nil)
	pub := e.publish("acme", "orders/1", `1`)
	if p := c.Pub(); p.Offset != pub.Offset {
		t.Fatalf("got %+v", p)
	}
	replay := e.dialWS(wstest.DialOpts{Query: "ticket=" + url.QueryEscape(tr.Ticket)})
	msg := replay.Fails(replay.Request(ws.OpConnect, nil), ws.CodeUnauthorized).Message
	if !strings.Contains(msg, "single-use") {
		t.Fatalf("message %q", msg)
	}
	replay.ClosedWith("unauthorized", session.CloseUnauthorized)
}

func TestTicketRequests(t *testing.T) {
	t.Parallel()
	e, _ := ticketEnv(t)
	tok := e.token("acme", "u1", "orders/*")
	if status, body := e.postTicket("", tok, ""); status != 200 || !strings.Contains(string(body), `"ticket"`) {
		t.Fatalf("with the cookie: %d %s", status, body)
	}
	// Never from the URL.
	if status, body := e.postTicket("", "", "access_token="+tok); status != 401 || !strings.Contains(string(body), "URL") {
		t.Fatalf("with access_token: %d %s", status, body)
	}
	if status, _ := e.postTicket("garbage", "", ""); status != 401 {
		t.Fatalf("bad token: %d", status)
	}
	expired := e.tokenExp("acme", "u1", time.Now().Add(-time.Minute), "orders/*")
	if status, body := e.postTicket(expired, "", ""); status != 401 || !strings.Contains(string(body), "token_expired") {
		t.Fatalf("expired token: %d %s", status, body)
	}
	if code, _, body := e.get("/v1/tickets"); code != 405 || !strings.Contains(body, "method_not_allowed") {
		t.Fatalf("GET /v1/tickets: %d %s", code, body)
	}

	// Without a ticket store: 404, and ticket parameters are refused.
	plain := newEnv(t, envOptions{})
	if status, body := plain.postTicket(tok, "", ""); status != 404 || !strings.Contains(string(body), "not enabled") {
		t.Fatalf("no store: %d %s", status, body)
	}
	plain.refused(request{query: url.Values{"channel": {"orders/1"}, "ticket": {strings.Repeat("A", 43)}}}, 401, "unauthorized")
}

// postTicketFrom does POST /v1/tickets with bearer from the loopback
// address ip, and returns the status and the error body's message.
func (e *testEnv) postTicketFrom(ip net.IP, bearer string) (int, string) {
	e.t.Helper()
	tr := &http.Transport{DisableKeepAlives: true, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}).DialContext}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, e.base+"/v1/tickets", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
		e.t.Fatalf("429 without Retry-After")
	}
	return resp.StatusCode, body.Error.Code + ": " + body.Error.Message
}

// TestTicketsBoundPerUser: one token used from many client addresses
// gets at most --max-tickets-per-user live tickets; beyond it a clear 429
// naming the setting, counted as a limit rejection. The per-address rate
// does not stand in the way of other users: a user of another tenant (and
// another user of the same tenant) still gets tickets, although the
// node-wide bound would have been reached. For the memory and the Redis
// ticket stores.
func TestTicketsBoundPerUser(t *testing.T) {
	t.Parallel()
	const perUser, nodeWide, addresses = 10, 30, 40
	stores := map[string]func(t *testing.T) auth.TicketIssuer{
		"memory": func(t *testing.T) auth.TicketIssuer {
			s, err := auth.NewMemoryTickets(auth.TicketConfig{MaxPerUser: perUser, MaxTickets: nodeWide})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"redis": func(t *testing.T) auth.TicketIssuer {
			rdb, prefix := testenv.RedisClient(t)
			s, err := auth.NewRedisTickets(rdb, auth.TicketConfig{MaxPerUser: perUser, Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tickets := open(t)
			e := newEnv(t, envOptions{deps: func(d *Deps) { d.Tickets = tickets }})
			tok := e.token("acme", "mallory", "orders/*")
			issued := 0
			for i := range addresses {
				status, msg := e.postTicketFrom(net.IPv4(127, 0, 1, byte(1+i)), tok)
				switch {
				case status == 200:
					issued++
				case status == 429 && strings.Contains(msg, "too_many_requests") && strings.Contains(msg, "--max-tickets-per-user (10)"):
				default:
					t.Fatalf("request %d: %d %s", i+1, status, msg)
				}
			}
			if issued != perUser {
				t.Fatalf("one token from %d addresses got %d tickets, want %d", addresses, issued, perUser)
			}
			for _, other := range []string{e.token("globex", "mallory", "orders/*"), e.token("acme", "alice", "orders/*")} {
				for i := range perUser {
					if status, msg := e.postTicketFrom(net.IPv4(127, 0, 2, byte(1+i)), other); status != 200 {
						t.Fatalf("another user's ticket %d: %d %s", i+1, status, msg)
					}
				}
			}
			if n := e.counter(e.srv.metrics.limitRejections.WithLabelValues("tickets_per_user")); n != addresses-perUser {
				t.Fatalf("herald_limit_rejections_total{tickets_per_user} = %v, want %d", n, addresses-perUser)
			}
		})
	}
}
