package subscriptions

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/internal/names"
)

// Source says which rule allowed a subscription.
type Source string

// Sources of an allow decision, in the order they are tried.
const (
	SourceGrant    Source = "grant"     // a pattern in the connection token
	SourceSubToken Source = "sub_token" // a subscription token for exactly this channel
	SourceWebhook  Source = "webhook"   // the authorization webhook
)

// minRecheck is the least RecheckAfter of a sub-token or webhook decision.
const minRecheck = time.Second

// Decision is the outcome of authorizing one subscription.
type Decision struct {
	Allowed bool
	// Source is the rule that allowed the subscription; empty on denial.
	Source Source
	// Reason explains a denial in words safe to show the client.
	Reason string
	// RecheckAfter is when the decision should be checked again: for a
	// subscription token, when it expires; for the webhook, when its
	// answer's TTL ends. Zero (grant decisions) means it lasts as long as
	// the connection token: recheck when that token is replaced.
	RecheckAfter time.Duration
	// SubToken holds the verified claims of the subscription token that
	// allowed the subscription (Source SourceSubToken), nil otherwise: the
	// subscription rests on it, so it ends at its exp and when its sid or
	// jti is revoked.
	SubToken *auth.Claims
}

// Request is one subscription to authorize. The tenant always comes from the
// verified connection claims; the client only names a channel inside it.
type Request struct {
	Claims   *auth.Claims
	Channel  string
	SubToken string // optional subscription token
	// Live says the subscription is already live (a recheck): a
	// subscription token must then not have reached its exp by this
	// server's clock, with no leeway for clock skew.
	Live bool
}

// Authorizer decides subscriptions: (a) a grant in the connection token,
// then (b) a subscription token, then (c) the authorization webhook. The
// zero value checks connection-token grants only; NewAuthorizer adds (b)
// and (c). It is safe for concurrent use and needs no Start/Stop: a
// webhook call runs at most WebhookTimeout.
type Authorizer struct {
	subTokens   SubTokenVerifier
	revocations RevocationChecker
	webhook     *webhook
	log         *slog.Logger // nil in the zero value
	m           *metrics
}

// NewAuthorizer validates cfg and returns an Authorizer.
func NewAuthorizer(cfg Config) (*Authorizer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	a := &Authorizer{subTokens: cfg.SubTokens, revocations: cfg.Revocations, log: cfg.Logger, m: m}
	if cfg.WebhookURL != "" {
		a.webhook = newWebhook(cfg, m)
	}
	return a, nil
}

// Authorize validates the tenant and channel names and decides the
// subscription of r.Claims.Tenant's channel r.Channel. An invalid name is
// an error wrapping ErrInvalidName; a denial is a Decision with Allowed
// false and a nil error, including when the webhook is down or slow
// (Reason ReasonWebhookUnavailable). The only other error is ctx ending
// while the webhook is asked.
//
// The gateway calls Authorize again, with the same Request and the
// connection's current claims, to recheck: RecheckAfter after an allow
// from a subscription token or the webhook, and for every subscription
// when the connection token is replaced.
func (a *Authorizer) Authorize(ctx context.Context, r Request) (Decision, error) {
	d, err := a.authorize(ctx, r)
	if err == nil {
		a.m.decision(d)
	}
	return d, err
}

func (a *Authorizer) authorize(ctx context.Context, r Request) (Decision, error) {
	c, err := checkRequest(r)
	if err != nil {
		return Decision{}, err
	}
	var why []string

	// (a) grants in the connection token.
	grants, err := CompileGrants(c.Subscribe, c.Subject)
	switch {
	case err != nil:
		why = append(why, "token holds an invalid grant: "+err.Error())
	case grants.Allows(r.Channel):
		return Decision{Allowed: true, Source: SourceGrant}, nil
	default:
		why = append(why, fmt.Sprintf("no grant for channel %q", names.Trunc(r.Channel)))
	}

	// (b) a subscription token naming exactly this channel.
	if r.SubToken != "" {
		d, reason := a.checkSubToken(ctx, c, r)
		if d.Allowed {
			return d, nil
		}
		why = append(why, reason)
	}

	// (c) the authorization webhook.
	if a.webhook != nil {
		out, err := a.webhook.decide(ctx, webhookKey{
			tenant: c.Tenant, subject: c.Subject, channel: r.Channel, sid: c.SessionID, jti: c.TokenID,
		})
		if err != nil {
			return Decision{Allowed: false, Reason: ReasonWebhookUnavailable},
				fmt.Errorf("subscriptions: authorize: %w", err)
		}
		switch {
		case out.failure != nil:
			why = append(why, ReasonWebhookUnavailable)
		case out.answer.allow:
			return Decision{Allowed: true, Source: SourceWebhook,
				RecheckAfter: max(time.Until(out.answer.expires), minRecheck)}, nil
		case out.answer.reason != "":
			why = append(why, "denied by authorization webhook: "+out.answer.reason)
		default:
			why = append(why, "denied by authorization webhook")
		}
	}
	return Decision{Allowed: false, Reason: strings.Join(why, "; ")}, nil
}

// AuthorizePublish decides whether the connection may publish to
// r.Channel (interactive channels): only the connection token's "publish"
// grants count, so the decision lasts as long as that token.
// r.SubToken is ignored.
func (a *Authorizer) AuthorizePublish(_ context.Context, r Request) (Decision, error) {
	c, err := checkRequest(r)
	if err != nil {
		return Decision{}, err
	}
	grants, err := CompileGrants(c.Publish, c.Subject)
	switch {
	case err != nil:
		return Decision{Reason: "token holds an invalid publish grant: " + err.Error()}, nil
	case grants.Allows(r.Channel):
		return Decision{Allowed: true, Source: SourceGrant}, nil
	}
	return Decision{Reason: fmt.Sprintf("no publish grant for channel %q", names.Trunc(r.Channel))}, nil
}

// checkRequest validates the parts of r every decision relies on.
func checkRequest(r Request) (*auth.Claims, error) {
	if r.Claims == nil {
		return nil, fmt.Errorf("subscriptions: authorize: no claims")
	}
	if err := names.ValidateTenant(r.Claims.Tenant); err != nil {
		return nil, err
	}
	if err := names.ValidateChannel(r.Channel); err != nil {
		return nil, err
	}
	return r.Claims, nil
}

func (a *Authorizer) checkSubToken(ctx context.Context, c *auth.Claims, r Request) (Decision, string) {
	if a.subTokens == nil {
		return Decision{}, "subscription tokens are not accepted"
	}
	sc, err := a.subTokens.VerifySubscriptionClaims(ctx, r.SubToken, c)
	if err != nil {
		return Decision{}, "subscription token rejected: " + strings.TrimPrefix(err.Error(), "auth: subscription token: ")
	}
	if sc.Channel != r.Channel {
		return Decision{}, "subscription token names another channel"
	}
	if r.Live && !time.Now().Before(sc.ExpiresAt) {
		return Decision{}, "subscription token expired"
	}
	if a.revocations != nil {
		revoked, err := a.revocations.IsRevoked(ctx, sc)
		if err != nil {
			if a.log != nil {
				a.log.Warn("subscriptions: revocation check failed; denying the subscription token",
					slog.String("tenant", c.Tenant), slog.String("error", err.Error()))
			}
			return Decision{}, "subscription token revocation check unavailable"
		}
		if revoked {
			return Decision{}, "subscription token revoked"
		}
	}
	return Decision{Allowed: true, Source: SourceSubToken,
		RecheckAfter: max(time.Until(sc.ExpiresAt), minRecheck), SubToken: sc}, ""
}
