package auth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestVerifyRefusesIATInTheFuture: a token issued (iat) further in the
// future than the clock-skew leeway is refused, naming iat; one inside
// the leeway, or issued in the past, is accepted. Subscription tokens
// get the same check.
func TestVerifyRefusesIATInTheFuture(t *testing.T) {
	secret := []byte("iat-check-secret-0123456789abcdef")
	v, err := NewVerifier(Config{HMACSecret: secret, Now: func() time.Time { return fixedNow }})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	mint := func(iat time.Time, channel string) string {
		t.Helper()
		tok, err := MintHS256(secret, Claims{Subject: "alice", Tenant: "acme", Channel: channel,
			ExpiresAt: fixedNow.Add(time.Hour), IssuedAt: iat})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	for _, tc := range []struct {
		name string
		iat  time.Time
		ok   bool
	}{
		{"issued an hour ago", fixedNow.Add(-time.Hour), true},
		{"issued now", fixedNow, true},
		{"issued 20s ahead (inside the 30s leeway)", fixedNow.Add(20 * time.Second), true},
		{"issued 2 minutes ahead", fixedNow.Add(2 * time.Minute), false},
		{"issued a day ahead", fixedNow.Add(24 * time.Hour), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(mint(tc.iat, ""))
			conn := &Claims{Subject: "alice", Tenant: "acme"}
			_, subErr := v.VerifySubscriptionClaims(context.Background(), mint(tc.iat, "orders/1"), conn)
			for what, err := range map[string]error{"connection token": err, "subscription token": subErr} {
				if tc.ok {
					if err != nil {
						t.Errorf("%s: %v", what, err)
					}
					continue
				}
				if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "issued in the future (iat)") {
					t.Errorf("%s: error %v, want an invalid token naming iat", what, err)
				}
			}
		})
	}
}

// TestVerifyMaxLifetime: Config.MaxLifetime (default 24h) bounds how long
// a token lives, measured from now and from its iat; a negative value
// lifts the bound.
func TestVerifyMaxLifetime(t *testing.T) {
	secret := []byte("lifetime-check-secret-0123456789ab")
	mint := func(iat, exp time.Time) string {
		t.Helper()
		tok, err := MintHS256(secret, Claims{Subject: "alice", Tenant: "acme", ExpiresAt: exp, IssuedAt: iat})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	clock := func() time.Time { return fixedNow }
	def, err := NewVerifier(Config{HMACSecret: secret, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	short, err := NewVerifier(Config{HMACSecret: secret, Now: clock, MaxLifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	unbounded, err := NewVerifier(Config{HMACSecret: secret, Now: clock, MaxLifetime: -1})
	if err != nil {
		t.Fatal(err)
	}
	var none time.Time
	for _, tc := range []struct {
		name      string
		v         *Verifier
		iat, exp  time.Time
		want      string // "" = accepted
		limitText string
	}{
		{"default: 23h", def, fixedNow, fixedNow.Add(23 * time.Hour), "", ""},
		{"default: exactly 24h", def, fixedNow, fixedNow.Add(24 * time.Hour), "", ""},
		{"default: 25h from now, no iat", def, none, fixedNow.Add(25 * time.Hour), "exp is further away", "24h0m0s"},
		{"default: a year", def, fixedNow, fixedNow.Add(365 * 24 * time.Hour), "exp is further away", "24h0m0s"},
		{"default: issued 30h ago, 2h left", def, fixedNow.Add(-30 * time.Hour), fixedNow.Add(2 * time.Hour), "exp - iat exceeds", "24h0m0s"},
		{"1h bound: 59m", short, fixedNow, fixedNow.Add(59 * time.Minute), "", ""},
		{"1h bound: 2h", short, fixedNow, fixedNow.Add(2 * time.Hour), "exp is further away", "1h0m0s"},
		{"unbounded: a year", unbounded, fixedNow, fixedNow.Add(365 * 24 * time.Hour), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.v.Verify(mint(tc.iat, tc.exp))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("verify: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.limitText) {
				t.Fatalf("error %v, want an invalid token saying %q and naming %s", err, tc.want, tc.limitText)
			}
		})
	}
}
