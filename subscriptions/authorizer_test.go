package subscriptions

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
)

var testSecret = []byte("subscriptions-test-secret-0123456789")

func conn(sub, tenant string, grants ...string) *auth.Claims {
	return &auth.Claims{Subject: sub, Tenant: tenant, Subscribe: grants, ExpiresAt: time.Now().Add(time.Hour)}
}

// subToken mints a subscription token for channel.
func subToken(t testing.TB, sub, tenant, channel string, ttl time.Duration) string {
	t.Helper()
	tok, err := auth.MintHS256(testSecret, auth.Claims{Subject: sub, Tenant: tenant, Channel: channel,
		ExpiresAt: time.Now().Add(ttl), TokenID: "jti-" + channel})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func newVerifier(t testing.TB) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(auth.Config{HMACSecret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestZeroAuthorizerGrantsOnly(t *testing.T) {
	var a Authorizer
	ctx := context.Background()
	c := conn("alice", "acme", "orders/*", "users/{sub}/**")
	for ch, want := range map[string]bool{
		"orders/1": true, "orders/1/x": false, "users/alice/inbox": true, "users/alice": false,
		"users/bob/inbox": false, "other": false,
	} {
		d, err := a.Authorize(ctx, Request{Claims: c, Channel: ch})
		if err != nil {
			t.Fatalf("%s: %v", ch, err)
		}
		if d.Allowed != want {
			t.Fatalf("%s: allowed=%v, want %v (%s)", ch, d.Allowed, want, d.Reason)
		}
		if want && (d.Source != SourceGrant || d.RecheckAfter != 0) {
			t.Fatalf("%s: grant decision %+v", ch, d)
		}
		if !want && !strings.Contains(d.Reason, "no grant for channel") {
			t.Fatalf("%s: reason %q", ch, d.Reason)
		}
	}
	// A subscription token is not accepted by the zero value.
	d, err := a.Authorize(ctx, Request{Claims: c, Channel: "private/1", SubToken: subToken(t, "alice", "acme", "private/1", time.Minute)})
	if err != nil || d.Allowed || !strings.Contains(d.Reason, "subscription tokens are not accepted") {
		t.Fatalf("zero value with a sub token: %+v, %v", d, err)
	}
	// Bad input is an error, not a decision.
	for _, r := range []Request{
		{Claims: nil, Channel: "orders/1"},
		{Claims: c, Channel: "orders//1"},
		{Claims: c, Channel: ""},
		{Claims: conn("alice", "bad/tenant", "**"), Channel: "orders/1"},
		{Claims: conn("alice", "", "**"), Channel: "orders/1"},
	} {
		if _, err := a.Authorize(ctx, r); err == nil {
			t.Fatalf("request %+v: want error", r)
		}
	}
	if _, err := a.Authorize(ctx, Request{Claims: c, Channel: "a b"}); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("invalid channel: want ErrInvalidName, got %v", err)
	}
	// An invalid grant denies with a reason (the token's issuer erred).
	d, err = a.Authorize(ctx, Request{Claims: conn("alice", "acme", "**/x", "orders/*"), Channel: "orders/1"})
	if err != nil || d.Allowed || !strings.Contains(d.Reason, "invalid grant") {
		t.Fatalf("invalid grant: %+v, %v", d, err)
	}
}

func TestAuthorizeSubscriptionTokens(t *testing.T) {
	v := newVerifier(t)
	revs := auth.NewMemoryRevocations()
	a, err := NewAuthorizer(Config{SubTokens: v, Revocations: revs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := conn("alice", "acme", "public/*")

	d, err := a.Authorize(ctx, Request{Claims: c, Channel: "private/7", SubToken: subToken(t, "alice", "acme", "private/7", 10*time.Minute)})
	if err != nil || !d.Allowed || d.Source != SourceSubToken {
		t.Fatalf("valid subscription token: %+v, %v", d, err)
	}
	if d.RecheckAfter < 9*time.Minute || d.RecheckAfter > 10*time.Minute {
		t.Fatalf("RecheckAfter %s, want the token's remaining life (~10m)", d.RecheckAfter)
	}
	if d.SubToken == nil || d.SubToken.TokenID != "jti-private/7" || d.SubToken.Channel != "private/7" {
		t.Fatalf("the decision does not carry the subscription token's claims: %+v", d.SubToken)
	}
	// A grant wins before the token is even looked at.
	d, _ = a.Authorize(ctx, Request{Claims: c, Channel: "public/1", SubToken: "garbage"})
	if !d.Allowed || d.Source != SourceGrant {
		t.Fatalf("grant first: %+v", d)
	}

	cases := []struct {
		name, channel, token, want string
	}{
		{"wrong channel", "private/8", subToken(t, "alice", "acme", "private/7", time.Minute), "names another channel"},
		{"other tenant", "private/7", subToken(t, "alice", "globex", "private/7", time.Minute), "tenant differs"},
		{"other subject", "private/7", subToken(t, "bob", "acme", "private/7", time.Minute), "sub differs"},
		{"expired", "private/7", subToken(t, "alice", "acme", "private/7", -time.Hour), "token expired"},
		{"connection token", "private/7", func() string {
			tok, _ := auth.MintHS256(testSecret, auth.Claims{Subject: "alice", Tenant: "acme", ExpiresAt: time.Now().Add(time.Hour)})
			return tok
		}(), "herald.channel is missing"},
		{"garbage", "private/7", "e30.e30.e30", "subscription token rejected"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := a.Authorize(ctx, Request{Claims: c, Channel: tc.channel, SubToken: tc.token})
			if err != nil || d.Allowed {
				t.Fatalf("want denial, got %+v, %v", d, err)
			}
			if !strings.Contains(d.Reason, tc.want) || !strings.Contains(d.Reason, "no grant for channel") {
				t.Fatalf("reason %q does not say %q", d.Reason, tc.want)
			}
			if strings.Contains(d.Reason, tc.token) {
				t.Fatalf("reason echoes the token")
			}
		})
	}

	// A revoked subscription token stops working.
	tok := subToken(t, "alice", "acme", "private/9", time.Minute)
	if d, _ := a.Authorize(ctx, Request{Claims: c, Channel: "private/9", SubToken: tok}); !d.Allowed {
		t.Fatalf("before revocation: %+v", d)
	}
	if err := revs.Revoke(ctx, auth.Revocation{TokenID: "jti-private/9", Until: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if d, _ := a.Authorize(ctx, Request{Claims: c, Channel: "private/9", SubToken: tok}); d.Allowed || !strings.Contains(d.Reason, "revoked") {
		t.Fatalf("after revocation: %+v", d)
	}
}

// TestAuthorizeLiveSubscriptionTokenHasNoLeeway: a subscription token
// just past its exp still opens a subscription (the verifier's clock-skew
// leeway), but a live subscription rechecked with it is refused: the
// leeway never extends a live subscription.
func TestAuthorizeLiveSubscriptionTokenHasNoLeeway(t *testing.T) {
	v := newVerifier(t)
	a, err := NewAuthorizer(Config{SubTokens: v})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := conn("alice", "acme")
	tok := subToken(t, "alice", "acme", "private/7", -5*time.Second) // inside the 30s leeway
	if d, err := a.Authorize(ctx, Request{Claims: c, Channel: "private/7", SubToken: tok}); err != nil || !d.Allowed {
		t.Fatalf("new subscription inside the leeway: %+v, %v", d, err)
	}
	d, err := a.Authorize(ctx, Request{Claims: c, Channel: "private/7", SubToken: tok, Live: true})
	if err != nil || d.Allowed || !strings.Contains(d.Reason, "subscription token expired") {
		t.Fatalf("live recheck past exp: %+v, %v; want a denial saying the subscription token expired", d, err)
	}
	fresh := subToken(t, "alice", "acme", "private/7", time.Minute)
	if d, err := a.Authorize(ctx, Request{Claims: c, Channel: "private/7", SubToken: fresh, Live: true}); err != nil || !d.Allowed {
		t.Fatalf("live recheck before exp: %+v, %v", d, err)
	}
}

func TestAuthorizePublish(t *testing.T) {
	var a Authorizer
	c := conn("alice", "acme", "**")
	c.Publish = []string{"rooms/{sub}", "rooms/lobby"}
	for ch, want := range map[string]bool{"rooms/lobby": true, "rooms/alice": true, "rooms/bob": false, "orders/1": false} {
		d, err := a.AuthorizePublish(context.Background(), Request{Claims: c, Channel: ch})
		if err != nil || d.Allowed != want {
			t.Fatalf("publish %s: %+v, %v (want %v)", ch, d, err, want)
		}
	}
}

func TestNewAuthorizerValidates(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{WebhookURL: "ftp://x"}, "absolute http(s) URL"},
		{Config{WebhookURL: "/relative"}, "absolute http(s) URL"},
		{Config{WebhookTimeout: 2 * time.Minute}, "WebhookTimeout"},
		{Config{WebhookDefaultTTL: time.Hour, WebhookMaxTTL: time.Minute}, "below WebhookDefaultTTL"},
		{Config{WebhookCacheSize: -1}, "WebhookCacheSize"},
		{Config{WebhookMaxInFlight: -1}, "WebhookMaxInFlight"},
	} {
		if _, err := NewAuthorizer(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("config %+v: want error %q, got %v", tc.cfg, tc.want, err)
		}
	}
}
