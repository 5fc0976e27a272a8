package gateway

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
)

func TestSubTokenChannel(t *testing.T) {
	tok, err := mintClaims("u1", "acme", time.Now().Add(time.Hour), nil, nil, "docs/42")
	if err != nil {
		t.Fatal(err)
	}
	if ch, err := subTokenChannel(tok); err != nil || ch != "docs/42" {
		t.Fatalf("subTokenChannel = %q, %v", ch, err)
	}
	conn, _ := mintClaims("u1", "acme", time.Now().Add(time.Hour), []string{"**"}, nil, "")
	payload := base64.RawURLEncoding.EncodeToString([]byte(`{"herald":{"channel":7}}`))
	for name, bad := range map[string]string{
		"connection token": conn,
		"two parts":        "a.b",
		"four parts":       "a.b.c.d",
		"not base64":       "a.!!.c",
		"not json":         "a." + base64.RawURLEncoding.EncodeToString([]byte("nope")) + ".c",
		"channel type":     "a." + payload + ".c",
		"huge":             strings.Repeat("a", auth.MaxTokenBytes+1),
	} {
		if ch, err := subTokenChannel(bad); err == nil || ch != "" {
			t.Errorf("%s: subTokenChannel = %q, %v", name, ch, err)
		} else if strings.Contains(err.Error(), bad) && len(bad) > 8 {
			t.Errorf("%s: the error echoes the token: %v", name, err)
		}
	}
}

func FuzzSubTokenChannel(f *testing.F) {
	tok, _ := mintClaims("u1", "acme", time.Now().Add(time.Hour), nil, nil, "docs/42")
	f.Add(tok)
	f.Add("a.b.c")
	f.Add("..")
	f.Add("a." + base64.RawURLEncoding.EncodeToString([]byte(`{"herald":null}`)) + ".c")
	f.Fuzz(func(t *testing.T, s string) {
		ch, err := subTokenChannel(s)
		if (err == nil) == (ch == "") {
			t.Fatalf("subTokenChannel(%q) = %q, %v", s, ch, err)
		}
	})
}

// TestSSESubTokens: sub_token parameters are paired with the channels they
// name and passed to the authorizer; a subscription-token channel ends
// alone at the token's exp.
func TestSSESubTokens(t *testing.T) {
	t.Parallel()
	e := hookEnv(t, "", nil)
	tok := e.token("acme", "u1", "orders/*")
	sub, subExp := mintSubToken(t, "u1", "docs/42", 2*time.Second)
	s := e.open(request{bearer: tok, query: url.Values{
		"channel": {"orders/1", "docs/42"}, "sub_token": {sub},
	}})
	s.next(t, 5*time.Second)
	s.subscribed(t)
	s.subscribed(t)
	pub := e.publish("acme", "docs/42", `1`)
	if _, p := s.publication(t); p.Offset != pub.Offset || p.Key.Channel != "docs/42" {
		t.Fatalf("got %+v", p)
	}

	e.refused(request{bearer: tok, query: q("channel", "docs/42")}, 403, "forbidden")
	other, _ := mintSubToken(t, "u1", "docs/43", time.Hour)
	msg := e.refused(request{bearer: tok, query: url.Values{"channel": {"docs/42"}, "sub_token": {other}}}, 400, "bad_request")
	if !strings.Contains(msg, `"docs/43"`) {
		t.Fatalf("message %q", msg)
	}
	e.refused(request{bearer: tok, query: url.Values{"channel": {"docs/42"}, "sub_token": {"garbage"}}}, 400, "bad_request")
	e.refused(request{bearer: tok, query: url.Values{"channel": {"docs/42"}, "sub_token": {sub, sub}}}, 400, "bad_request")
	stranger, _ := mintSubToken(t, "u2", "docs/42", time.Hour)
	msg = e.refused(request{bearer: tok, query: url.Values{"channel": {"docs/42"}, "sub_token": {stranger}}}, 403, "forbidden")
	if !strings.Contains(msg, "sub differs") {
		t.Fatalf("message %q", msg)
	}

	// When the subscription token expires, docs/42 ends; orders/1 goes on.
	ev := s.nextEvent(t)
	if ev.Name != "unsubscribed" || !strings.Contains(ev.Data, `"channel":"docs/42"`) ||
		!strings.Contains(ev.Data, `"reason":"token_expired"`) || !strings.Contains(ev.Data, `"resubscribe":true`) {
		t.Fatalf("want unsubscribed docs/42 (token_expired, resubscribe), got %+v", ev)
	}
	if late := time.Since(subExp); late > time.Second || late < 0 {
		t.Fatalf("ended %s after the subscription token's exp, want at it", late)
	}
	pub = e.publish("acme", "orders/1", `2`)
	if _, p := s.publication(t); p.Offset != pub.Offset || p.Key.Channel != "orders/1" {
		t.Fatalf("got %+v", p)
	}
}

// mintSubToken mints a subscription token of tenant acme for sub and
// channel, living at least life.
func mintSubToken(t *testing.T, sub, channel string, life time.Duration) (string, time.Time) {
	t.Helper()
	exp := time.Now().Add(life).Truncate(time.Second).Add(time.Second)
	tok, err := mintClaims(sub, "acme", exp, nil, nil, channel)
	if err != nil {
		t.Fatal(err)
	}
	return tok, exp
}
