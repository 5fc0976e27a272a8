package subscriptions_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/subscriptions"
)

// The zero Authorizer decides by the grants of the connection token
// alone: "*" stands for one segment, "**" for the rest, "{sub}" for the
// token's subject. A malformed channel name is an error, not a denial.
func ExampleAuthorizer() {
	var authz subscriptions.Authorizer
	claims := &auth.Claims{Subject: "u1", Tenant: "acme", Subscribe: []string{"orders/*", "users/{sub}/**"}}
	for _, ch := range []string{"orders/42", "users/u1/inbox", "users/u2/inbox", "orders//42"} {
		d, err := authz.Authorize(context.Background(), subscriptions.Request{Claims: claims, Channel: ch})
		switch {
		case errors.Is(err, subscriptions.ErrInvalidName):
			fmt.Printf("%s: invalid name\n", ch)
		case err != nil:
			log.Fatal(err)
		case d.Allowed:
			fmt.Printf("%s: allowed by %s\n", ch, d.Source)
		default:
			fmt.Printf("%s: denied: %s\n", ch, d.Reason)
		}
	}
	// Output:
	// orders/42: allowed by grant
	// users/u1/inbox: allowed by grant
	// users/u2/inbox: denied: no grant for channel "users/u2/inbox"
	// orders//42: invalid name
}

// NewAuthorizer adds to the grants a subscription token, which names
// exactly one channel, and the authorization webhook, which the
// application answers for everything else. Both decisions are to be
// checked again: the subscription token's at its exp, the webhook's when
// its answer's TTL ends; a grant's lasts as long as the connection token.
func ExampleNewAuthorizer() {
	secret := []byte("change-me-to-32-random-bytes-or-more")
	// The application's webhook: members of a document see its channel.
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var q struct{ Tenant, Subject, Channel string }
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		allow := q.Subject == "u1" && strings.HasPrefix(q.Channel, "docs/")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"allow": allow, "ttl_seconds": 300, "reason": "not a member"})
	}))
	defer hook.Close()

	authz, err := subscriptions.NewAuthorizer(subscriptions.Config{
		SubTokens:  auth.NewHMACVerifier(secret, 0),
		WebhookURL: hook.URL,
	})
	if err != nil {
		log.Fatal(err)
	}
	claims := &auth.Claims{Subject: "u1", Tenant: "acme", Subscribe: []string{"orders/*"}}
	// A subscription token for one channel, minted by the application.
	subToken, err := auth.MintHS256(secret, auth.Claims{
		Subject: "u1", Tenant: "acme", Channel: "rooms/7", ExpiresAt: time.Now().Add(time.Hour),
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range []subscriptions.Request{
		{Claims: claims, Channel: "orders/42"},
		{Claims: claims, Channel: "rooms/7", SubToken: subToken},
		{Claims: claims, Channel: "docs/3"},
		{Claims: &auth.Claims{Subject: "u2", Tenant: "acme"}, Channel: "docs/3"},
	} {
		d, err := authz.Authorize(context.Background(), r)
		if err != nil {
			log.Fatal(err)
		}
		if !d.Allowed {
			fmt.Printf("%s for %s: denied: %s\n", r.Channel, r.Claims.Subject, d.Reason)
			continue
		}
		fmt.Printf("%s for %s: allowed by %s, check again after %s\n",
			r.Channel, r.Claims.Subject, d.Source, d.RecheckAfter.Round(time.Minute))
	}
	// Output:
	// orders/42 for u1: allowed by grant, check again after 0s
	// rooms/7 for u1: allowed by sub_token, check again after 1h0m0s
	// docs/3 for u1: allowed by webhook, check again after 5m0s
	// docs/3 for u2: denied: no grant for channel "docs/3"; denied by authorization webhook: not a member
}
