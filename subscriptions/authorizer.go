package subscriptions

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldgw/herald/auth"
)

// Source says which rule allowed a subscription.
type Source string

// Sources of an allow decision, in the order they are tried.
const (
	SourceGrant    Source = "grant"     // a pattern in the connection token
	SourceSubToken Source = "sub_token" // a subscription token for exactly this channel
	SourceWebhook  Source = "webhook"   // the authorization webhook
)

// Decision is the outcome of authorizing one subscription.
type Decision struct {
	Allowed bool
	Source  Source
	// Reason explains a denial in words safe to show the client.
	Reason string
	// RecheckAfter is when the decision should be checked again; zero means
	// it lasts as long as the connection token (grants are fixed in it).
	RecheckAfter time.Duration
}

// Request is one subscription to authorize. The tenant always comes from the
// verified connection claims; the client only names a channel inside it.
type Request struct {
	Claims   *auth.Claims
	Channel  string
	SubToken string // optional subscription token
}

// Authorizer decides subscriptions. The zero value checks connection-token
// grants only.
type Authorizer struct{}

// Authorize validates the channel name and decides the subscription.
// An invalid name is an error wrapping ErrInvalidName; a denial is a
// Decision with Allowed false and a nil error.
func (a *Authorizer) Authorize(ctx context.Context, r Request) (Decision, error) {
	if r.Claims == nil {
		return Decision{}, fmt.Errorf("subscriptions: authorize: no claims")
	}
	if err := ValidateChannel(r.Channel); err != nil {
		return Decision{}, err
	}
	grants, err := CompileGrants(r.Claims.Subscribe, r.Claims.Subject)
	if err != nil {
		return Decision{Allowed: false, Reason: "token holds an invalid grant: " + err.Error()}, nil
	}
	if grants.Allows(r.Channel) {
		return Decision{Allowed: true, Source: SourceGrant}, nil
	}
	return Decision{Allowed: false, Reason: fmt.Sprintf("no grant for channel %q", trunc(r.Channel))}, nil
}
