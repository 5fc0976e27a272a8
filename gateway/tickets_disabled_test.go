package gateway

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestTicketsDisabled: a gateway without a ticket store answers POST
// /v1/tickets with 404 and the code tickets_disabled, the one answer after
// which a browser client may put the token in the URL; a path that does
// not exist is another 404 (not_found).
func TestTicketsDisabled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{}) // no Deps.Tickets
	status, body := e.postTicket(e.token("acme", "u1", "orders/*"), "", "")
	var got struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("POST /v1/tickets: %d %s: %v", status, body, err)
	}
	if status != http.StatusNotFound || got.Error.Code != "tickets_disabled" || got.Error.Message == "" {
		t.Fatalf("POST /v1/tickets without tickets: %d %s, want 404 tickets_disabled with a message", status, body)
	}
	if status, _, body := e.get("/v1/nothing"); status != http.StatusNotFound || !contains(body, `"not_found"`) {
		t.Fatalf("GET /v1/nothing: %d %s, want 404 not_found", status, body)
	}
}
