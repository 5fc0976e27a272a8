package auth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestVerifySubscriptionToken(t *testing.T) {
	ed := newTestKey(t, "EdDSA", "sub-key", 0)
	v, err := NewVerifier(Config{JWKS: writeJWKS(t, "", ed)})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	conn := baseClaims("alice", "acme")
	subTok := func(f func(*Claims)) string {
		c := Claims{Subject: "alice", Tenant: "acme", Channel: "orders/42", ExpiresAt: time.Now().Add(5 * time.Minute)}
		f(&c)
		return signWith(t, ed, c)
	}

	ch, err := v.VerifySubscriptionToken(subTok(func(*Claims) {}), &conn)
	if err != nil || ch != "orders/42" {
		t.Fatalf("valid subscription token: %q, %v", ch, err)
	}
	sc, err := v.VerifySubscriptionClaims(context.Background(), subTok(func(*Claims) {}), &conn)
	if err != nil || sc.Channel != "orders/42" || sc.ExpiresAt.IsZero() {
		t.Fatalf("claims of a valid subscription token: %+v, %v", sc, err)
	}

	cases := []struct {
		name, token, want string
	}{
		{"other tenant", subTok(func(c *Claims) { c.Tenant = "globex" }), "tenant differs"},
		{"other subject", subTok(func(c *Claims) { c.Subject = "bob" }), "sub differs"},
		{"connection token (no channel)", signWith(t, ed, conn), "herald.channel is missing"},
		{"expired", subTok(func(c *Claims) { c.ExpiresAt = time.Now().Add(-time.Hour) }), "token expired"},
		{"garbage", "x.y.z", "malformed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch, err := v.VerifySubscriptionToken(tc.token, &conn)
			if err == nil || ch != "" {
				t.Fatalf("want rejection, got channel %q", ch)
			}
			if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q: want ErrInvalidToken naming %q", err, tc.want)
			}
			assertNoEcho(t, err, tc.token)
		})
	}
	if _, err := v.VerifySubscriptionToken(subTok(func(*Claims) {}), nil); err == nil {
		t.Fatal("nil connection claims must be rejected")
	}
}
