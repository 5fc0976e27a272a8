package auth

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/heraldgw/herald/internal/promreg"
)

func TestVerifierMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	secret := []byte("metrics-secret")
	ed := newTestKey(t, "EdDSA", "m-1", 0)
	srv := newJWKSServer(t, ed)
	v, err := NewVerifier(Config{HMACSecret: secret, JWKS: srv.URL, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	if err := v.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A second Verifier on the same registry shares the collectors.
	v2, err := NewVerifier(Config{HMACSecret: secret, Registerer: reg})
	if err != nil {
		t.Fatalf("second verifier on one registry: %v", err)
	}
	c := baseClaims("alice", "acme")
	ok, _ := MintHS256(secret, c)
	c.ExpiresAt = time.Now().Add(-time.Hour)
	expired, _ := MintHS256(secret, c)
	_, _ = v.Verify(ok)
	_, _ = v2.Verify(ok)
	_, _ = v.Verify(expired)
	_, _ = v.Verify("garbage")
	if _, err := v.Verify(signWith(t, ed, baseClaims("alice", "acme"))); err != nil {
		t.Fatal(err)
	}

	want := `
# HELP herald_auth_token_verifications_total Token verifications by result (ok, expired, invalid).
# TYPE herald_auth_token_verifications_total counter
herald_auth_token_verifications_total{result="expired"} 1
herald_auth_token_verifications_total{result="invalid"} 1
herald_auth_token_verifications_total{result="ok"} 3
# HELP herald_auth_jwks_keys Usable keys in the last JWKS loaded.
# TYPE herald_auth_jwks_keys gauge
herald_auth_jwks_keys 1
`
	if err := testutil.GatherAndCompare(reg, stringsReader(want),
		"herald_auth_token_verifications_total", "herald_auth_jwks_keys"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(mustCounter(t, reg)); n < 1 {
		t.Fatalf("jwks reloads ok = %v, want at least 1", n)
	}
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

// mustCounter returns the jwks reload counter for result="ok".
func mustCounter(t *testing.T, reg *prometheus.Registry) prometheus.Counter {
	t.Helper()
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_auth_jwks_reloads_total",
		Help: "JWKS loads by result (ok, error).",
	}, []string{"result"})
	got, err := promreg.Register(reg, vec)
	if err != nil {
		t.Fatal(err)
	}
	return got.WithLabelValues("ok")
}
