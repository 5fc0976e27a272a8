package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
)

// TestServeTickets: `herald serve` issues tickets by default; with
// --tickets=false POST /v1/tickets answers 404 tickets_disabled, and a
// stream opened with the token in access_token is served.
func TestServeTickets(t *testing.T) {
	t.Parallel()
	tok := mint(t, "acme", "u1", "orders/**")
	post := func(base string) (int, string) { return postTicket(t, base, tok) }

	if status, body := post(startServe(t)); status != http.StatusOK {
		t.Fatalf("POST /v1/tickets by default: %d %s", status, body)
	}

	off := startServe(t, "--tickets=false")
	status, body := post(off)
	var got struct {
		Error struct{ Code string } `json:"error"`
	}
	if json.Unmarshal([]byte(body), &got) != nil || status != http.StatusNotFound || got.Error.Code != "tickets_disabled" {
		t.Fatalf("POST /v1/tickets with --tickets=false: %d %s, want 404 tickets_disabled", status, body)
	}
	s := openSSE(t, off+"/v1/sse?"+url.Values{"channel": {"orders/1"}, "access_token": {tok}}.Encode(), "", "")
	defer s.Close()
	if s.Status != http.StatusOK {
		t.Fatalf("a stream with access_token, tickets off: %d %s", s.Status, s.Body)
	}
}
