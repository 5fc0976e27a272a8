package auth

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldgw/herald/internal/names"
)

// fixedNow is the clock of the claim-timing tests.
var fixedNow = time.Unix(1_800_000_000, 0)

func TestVerifyEveryAlgorithm(t *testing.T) {
	var keys []testKey
	for i, alg := range asymmetricAlgorithms { // HMAC: the secret only
		keys = append(keys, newTestKey(t, alg, "k-"+alg, i%2))
	}
	secret := []byte("a-shared-hmac-secret-of-32-bytes!")
	v, err := NewVerifier(Config{
		HMACSecret: secret,
		JWKS:       writeJWKS(t, "", keys...),
		Algorithms: SupportedAlgorithms(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	want := baseClaims("alice", "acme")
	for _, k := range keys {
		t.Run(k.alg+"/kid", func(t *testing.T) {
			got, err := v.Verify(signWith(t, k, want))
			if err != nil {
				t.Fatalf("verify: %v", err)
			}
			if got.Subject != "alice" || got.Tenant != "acme" || got.SessionID != "sess-1" || got.TokenID != "tok-1" ||
				strings.Join(got.Subscribe, ",") != "orders/*,users/{sub}/**" || !got.ExpiresAt.Equal(want.ExpiresAt.Truncate(time.Second)) {
				t.Fatalf("claims do not round-trip: %+v", got)
			}
		})
		t.Run(k.alg+"/no-kid", func(t *testing.T) {
			if _, err := v.Verify(sign(t, k.alg, k.priv, "", want, tokenOpts{})); err != nil {
				t.Fatalf("verify without kid (every fitting key is tried): %v", err)
			}
		})
	}
	for _, alg := range []string{"HS256", "HS384", "HS512"} {
		t.Run(alg+"/secret", func(t *testing.T) {
			if _, err := v.Verify(sign(t, alg, secret, "", want, tokenOpts{})); err != nil {
				t.Fatalf("verify with the configured secret: %v", err)
			}
		})
	}
}

func TestVerifyRejects(t *testing.T) {
	rsa := newTestKey(t, "RS256", "rsa-1", 0)
	rsaPinned := newTestKey(t, "RS256", "rsa-pinned", 1)
	rsaPinned.jwk["alg"] = "RS256"
	ec256 := newTestKey(t, "ES256", "ec-256", 0)
	ec384 := newTestKey(t, "ES384", "ec-384", 0)
	ed := newTestKey(t, "EdDSA", "ed-1", 0)
	secret := []byte("the-configured-hmac-secret-0123456789")
	jwksPath := writeJWKS(t, "", rsa, rsaPinned, ec256, ec384, ed)

	pubDER, err := x509.MarshalPKIXPublicKey(rsa.public())
	if err != nil {
		t.Fatal(err)
	}
	rsaPubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})

	full := Config{HMACSecret: secret, JWKS: jwksPath, Issuer: "https://idp.example", Audience: "herald", Now: func() time.Time { return fixedNow }}
	c := baseClaims("alice", "acme")
	c.ExpiresAt = fixedNow.Add(time.Hour)
	std := tokenOpts{iss: "https://idp.example", aud: []string{"herald"}}
	withOpts := func(o tokenOpts, f func(*tokenOpts)) tokenOpts { f(&o); return o }
	withClaims := func(f func(*Claims)) Claims { cc := c; f(&cc); return cc }

	noneToken := func() string {
		h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
		p := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"alice","exp":1900000000,"herald":{"tenant":"acme","subscribe":["**"]}}`))
		return h + "." + p + "."
	}()

	cases := []struct {
		name  string
		cfg   Config
		token string
		want  string // substring of the error
		ok    bool
	}{
		{name: "valid", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, c, std), ok: true},
		{name: "alg none", cfg: full, token: noneToken, want: "algorithm none not allowed"},
		{name: "alg not allowed", cfg: withCfg(full, func(c *Config) { c.Algorithms = []string{"RS256"} }),
			token: sign(t, "ES256", ec256.priv, ec256.kid, c, std), want: "algorithm ES256 not allowed"},
		{name: "HS256 signed with RSA public key bytes, kid of the RSA key", cfg: withCfg(full, func(c *Config) { c.Algorithms = SupportedAlgorithms() }),
			token: sign(t, "HS256", rsaPubPEM, rsa.kid, c, std), want: "does not fit algorithm HS256"},
		{name: "HS256 signed with RSA public key bytes, no kid, no secret", cfg: withCfg(full, func(c *Config) { c.HMACSecret = nil; c.Algorithms = SupportedAlgorithms() }),
			token: sign(t, "HS256", rsaPubPEM, "", c, std), want: "no key for algorithm HS256"},
		{name: "HS256 signed with RSA public key bytes, no kid, with secret", cfg: withCfg(full, func(c *Config) { c.Algorithms = SupportedAlgorithms() }),
			token: sign(t, "HS256", rsaPubPEM, "", c, std), want: "signature does not verify"},
		{name: "HS256 not allowed with JWKS only", cfg: withCfg(full, func(c *Config) { c.HMACSecret = nil }),
			token: sign(t, "HS256", rsaPubPEM, rsa.kid, c, std), want: "algorithm HS256 not allowed"},
		{name: "ES256 with kid of an RSA key", cfg: full, token: sign(t, "ES256", ec256.priv, rsa.kid, c, std), want: "does not fit algorithm ES256"},
		{name: "ES384 with kid of a P-256 key", cfg: full, token: sign(t, "ES384", ec384.priv, ec256.kid, c, std), want: "does not fit algorithm ES384"},
		{name: "EdDSA with kid of an EC key", cfg: full, token: sign(t, "EdDSA", ed.priv, ec256.kid, c, std), want: "does not fit algorithm EdDSA"},
		{name: "PS256 with kid of a JWK pinned to RS256", cfg: full, token: sign(t, "PS256", rsaPinned.priv, rsaPinned.kid, c, std), want: "does not fit algorithm PS256"},
		{name: "unknown kid", cfg: full, token: sign(t, "ES256", ec256.priv, "nobody", c, std), want: "unknown kid"},
		{name: "kid not a string", cfg: full, token: sign(t, "ES256", ec256.priv, "", c, withOpts(std, func(o *tokenOpts) { o.header = map[string]any{"kid": 7} })), want: "kid is not a string"},
		{name: "signed by another key of the same type", cfg: full, token: sign(t, "RS256", rsaKey(t, 1), rsa.kid, c, std), want: "signature does not verify"},
		{name: "tampered payload", cfg: full, token: tamper(sign(t, "ES256", ec256.priv, ec256.kid, c, std)), want: "signature does not verify"},
		{name: "garbage", cfg: full, token: "not.a.jwt", want: "malformed"},
		{name: "two segments", cfg: full, token: "abc.def", want: "malformed"},
		{name: "empty", cfg: full, token: "", want: "empty"},
		{name: "too long", cfg: full, token: strings.Repeat("a", MaxTokenBytes+1), want: "longer than"},
		{name: "expired beyond leeway", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, withClaims(func(c *Claims) { c.ExpiresAt = fixedNow.Add(-31 * time.Second) }), std), want: "token expired"},
		{name: "expired within leeway", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, withClaims(func(c *Claims) { c.ExpiresAt = fixedNow.Add(-29 * time.Second) }), std), ok: true},
		{name: "expired, no leeway", cfg: withCfg(full, func(c *Config) { c.Leeway = -1 }), token: sign(t, "RS256", rsa.priv, rsa.kid, withClaims(func(c *Claims) { c.ExpiresAt = fixedNow.Add(-time.Second) }), std), want: "token expired"},
		{name: "custom leeway", cfg: withCfg(full, func(c *Config) { c.Leeway = 2 * time.Minute }), token: sign(t, "RS256", rsa.priv, rsa.kid, withClaims(func(c *Claims) { c.ExpiresAt = fixedNow.Add(-90 * time.Second) }), std), ok: true},
		{name: "nbf beyond leeway", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, c, withOpts(std, func(o *tokenOpts) { o.nbf = fixedNow.Add(31 * time.Second) })), want: "not valid yet (nbf)"},
		{name: "nbf within leeway", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, c, withOpts(std, func(o *tokenOpts) { o.nbf = fixedNow.Add(29 * time.Second) })), ok: true},
		{name: "exp missing", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, c, withOpts(std, func(o *tokenOpts) { o.noExp = true })), want: "exp is required"},
		{name: "iss wrong", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, c, withOpts(std, func(o *tokenOpts) { o.iss = "https://evil.example" })), want: "iss does not match"},
		{name: "iss missing", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, c, withOpts(std, func(o *tokenOpts) { o.iss = "" })), want: "iss does not match"},
		{name: "iss unchecked when unset", cfg: withCfg(full, func(c *Config) { c.Issuer = "" }), token: sign(t, "RS256", rsa.priv, rsa.kid, c, withOpts(std, func(o *tokenOpts) { o.iss = "anyone" })), ok: true},
		{name: "aud wrong", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, c, withOpts(std, func(o *tokenOpts) { o.aud = []string{"other"} })), want: "aud does not include"},
		{name: "aud missing", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, c, withOpts(std, func(o *tokenOpts) { o.aud = nil })), want: "aud does not include"},
		{name: "aud among several", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, c, withOpts(std, func(o *tokenOpts) { o.aud = []string{"other", "herald"} })), ok: true},
		{name: "aud unchecked when unset", cfg: withCfg(full, func(c *Config) { c.Audience = "" }), token: sign(t, "RS256", rsa.priv, rsa.kid, c, withOpts(std, func(o *tokenOpts) { o.aud = nil })), ok: true},
		{name: "sub missing", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, withClaims(func(c *Claims) { c.Subject = "" }), std), want: "sub is required"},
		{name: "subscription token as connection token", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, withClaims(func(c *Claims) { c.Channel = "orders/1" }), std), want: "cannot authenticate a connection"},
		{name: "tenant missing", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, withClaims(func(c *Claims) { c.Tenant = "" }), std), want: "herald.tenant is required"},
		{name: "crit header", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, c, withOpts(std, func(o *tokenOpts) { o.header = map[string]any{"crit": []string{"exp"}} })), want: "header carries crit"},
		{name: "crit header empty", cfg: full, token: sign(t, "ES256", ec256.priv, ec256.kid, c, withOpts(std, func(o *tokenOpts) { o.header = map[string]any{"crit": []string{}} })), want: "header carries crit"},
		{name: "crit header null, HMAC", cfg: full, token: sign(t, "HS256", secret, "", c, withOpts(std, func(o *tokenOpts) { o.header = map[string]any{"crit": nil} })), want: "header carries crit"},
		{name: "tenant dot-segment", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, withClaims(func(c *Claims) { c.Tenant = ".." }), std), want: "herald.tenant is not a valid tenant name"},
		{name: "tenant with slash", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, withClaims(func(c *Claims) { c.Tenant = "acme/other" }), std), want: "herald.tenant is not a valid tenant name"},
		{name: "tenant too long", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, withClaims(func(c *Claims) { c.Tenant = strings.Repeat("t", 65) }), std), want: "herald.tenant is not a valid tenant name"},
		{name: "tenant three dots", cfg: full, token: sign(t, "RS256", rsa.priv, rsa.kid, withClaims(func(c *Claims) { c.Tenant = "..." }), std), ok: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Stop()
			got, err := v.Verify(tc.token)
			if tc.ok {
				if err != nil || got == nil {
					t.Fatalf("want success, got %v", err)
				}
				return
			}
			mustRefuse(t, got, err, tc.want)
			if strings.Contains(tc.want, "expired") && !errors.Is(err, ErrExpired) {
				t.Errorf("error %v does not wrap ErrExpired", err)
			}
			assertNoEcho(t, err, tc.token)
		})
	}
}

// assertNoEcho fails when err's message contains any token segment.
func assertNoEcho(t *testing.T, err error, token string) {
	t.Helper()
	for _, part := range strings.Split(token, ".") {
		if len(part) >= 8 && strings.Contains(err.Error(), part) {
			t.Fatalf("error %q echoes part of the token", err)
		}
	}
}

func withCfg(c Config, f func(*Config)) Config { f(&c); return c }

// tamper flips the payload so the signature no longer covers it.
func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	payload = []byte(strings.Replace(string(payload), `"alice"`, `"mallory"`, 1))
	parts[1] = base64.RawURLEncoding.EncodeToString(payload)
	return strings.Join(parts, ".")
}

func TestHMACVerifierCompatibility(t *testing.T) {
	secret := []byte("dev-secret")
	c := baseClaims("bob", "globex")
	tok, err := MintHS256(secret, c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := NewHMACVerifier(secret, 0).Verify(tok)
	if err != nil || got.Subject != "bob" || got.Tenant != "globex" {
		t.Fatalf("verify minted token: %+v, %v", got, err)
	}
	if _, err := NewHMACVerifier([]byte("other"), 0).Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("wrong secret: want ErrInvalidToken, got %v", err)
	}
	if _, err := NewHMACVerifier(nil, 0).Verify(tok); !errors.Is(err, ErrNoKey) {
		t.Fatalf("empty secret: want ErrNoKey, got %v", err)
	}
	c.ExpiresAt = time.Now().Add(-2 * time.Second)
	old, _ := MintHS256(secret, c)
	if _, err := NewHMACVerifier(secret, 0).Verify(old); !errors.Is(err, ErrExpired) {
		t.Fatalf("zero leeway must mean none: want ErrExpired, got %v", err)
	}
	if _, err := NewHMACVerifier(secret, time.Minute).Verify(old); err != nil {
		t.Fatalf("leeway of a minute: %v", err)
	}
	ec := newTestKey(t, "ES256", "", 0)
	if _, err := NewHMACVerifier(secret, 0).Verify(signWith(t, ec, baseClaims("bob", "globex"))); err == nil ||
		!strings.Contains(err.Error(), "algorithm ES256 not allowed") {
		t.Fatalf("HMAC verifier must refuse ES256: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no key source", Config{}, "set HMACSecret or JWKS"},
		{"alg none", Config{HMACSecret: []byte("s"), Algorithms: []string{"none"}}, `"none" is never accepted`},
		{"alg unsupported", Config{HMACSecret: []byte("s"), Algorithms: []string{"RS1"}}, `"RS1" is not supported`},
		{"bad url", Config{JWKS: "https://"}, "does not parse"},
		{"negative refresh", Config{HMACSecret: []byte("s"), JWKSRefresh: -time.Second}, "must not be negative"},
		{"min refresh above refresh", Config{HMACSecret: []byte("s"), JWKSRefresh: time.Second, JWKSMinRefresh: time.Minute}, "must not exceed"},
		{"missing file", Config{JWKS: "/nonexistent/jwks.json"}, "open file"},
		{"empty file", Config{JWKS: writeRaw(t, `{"keys":[]}`)}, "no usable key"},
		{"not a jwks", Config{JWKS: writeRaw(t, `[1,2]`)}, "not a JSON object"},
		{"no keys member", Config{JWKS: writeRaw(t, `{"k":1}`)}, `no "keys" array`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(tc.cfg)
			if err == nil {
				v.Stop()
				t.Fatalf("want error %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// signRawHS256 signs payload, a JSON text used as is, under header with
// secret, so tests can send claims golang-jwt's types would not produce.
func signRawHS256(t *testing.T, secret []byte, header, payload string) string {
	t.Helper()
	enc := base64.RawURLEncoding.EncodeToString
	signing := enc([]byte(header)) + "." + enc([]byte(payload))
	sig, err := jwt.SigningMethodHS256.Sign(signing, secret)
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + enc(sig)
}

// TestVerifyTimeClaimsMustBeNumbers: exp, nbf and iat are NumericDates (RFC
// 7519 §2), JSON numbers only. golang-jwt accepts a string holding a number
// ("1893456000") and treats null as absent; Herald refuses both, and any
// other non-number, with a message naming the claim.
func TestVerifyTimeClaimsMustBeNumbers(t *testing.T) {
	secret := []byte("time-claims-secret-0123456789abcdef")
	// The exps lie years ahead: no lifetime bound here, only the format.
	v, err := NewVerifier(Config{HMACSecret: secret, Now: func() time.Time { return fixedNow }, MaxLifetime: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	const header = `{"alg":"HS256","typ":"JWT"}`
	payload := func(members string) string {
		return `{"sub":"alice","herald":{"tenant":"acme"}` + members + `}`
	}
	for _, tc := range []struct {
		name, members, want string
	}{
		{"exp string", `,"exp":"1893456000"`, "exp is not a JSON number"},
		{"exp string, upper-case member", `,"EXP":"1893456000"`, "exp is not a JSON number"},
		{"exp number then string duplicate", `,"exp":1893456000,"exp":"1893456000"`, "exp is not a JSON number"},
		{"exp bool", `,"exp":true`, "exp is not a JSON number"},
		{"exp object", `,"exp":{"n":1893456000}`, "exp is not a JSON number"},
		{"exp array", `,"exp":[1893456000]`, "exp is not a JSON number"},
		{"exp null", `,"exp":null`, "exp is not a JSON number"},
		{"nbf string", `,"exp":1893456000,"nbf":"1700000000"`, "nbf is not a JSON number"},
		{"nbf bool", `,"exp":1893456000,"nbf":false`, "nbf is not a JSON number"},
		{"iat string", `,"exp":1893456000,"iat":"1700000000"`, "iat is not a JSON number"},
		{"iat object", `,"exp":1893456000,"iat":{}`, "iat is not a JSON number"},
		{"iat null", `,"exp":1893456000,"iat":null`, "iat is not a JSON number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := signRawHS256(t, secret, header, payload(tc.members))
			got, err := v.Verify(tok)
			mustRefuse(t, got, err, tc.want)
			assertNoEcho(t, err, tok)
		})
	}
	for _, tc := range []struct{ name, members string }{
		{"integers", `,"exp":1893456000,"nbf":1700000000,"iat":1700000000`},
		{"fraction and exponent", `,"exp":1.893456e9,"nbf":1700000000.5,"iat":17e8`},
		{"spaces around numbers", `, "exp" : 1893456000 , "iat" : 1700000000 `},
	} {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			if _, err := v.Verify(signRawHS256(t, secret, header, payload(tc.members))); err != nil {
				t.Fatalf("verify: %v", err)
			}
		})
	}
}

// TestVerifyInvalidTenantIsABadToken: a verified token whose herald.tenant
// is not a tenant name fails as an invalid token (the gateway's 401), for
// connection and subscription tokens alike, and not as an invalid name
// (which the gateway answers with 400).
func TestVerifyInvalidTenantIsABadToken(t *testing.T) {
	secret := []byte("tenant-check-secret-0123456789abcd")
	v, err := NewVerifier(Config{HMACSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	conn := baseClaims("alice", "acme")
	for _, tenant := range []string{".", "..", "a/b", "a b", "ü", strings.Repeat("t", 65), "acme\x00"} {
		c := baseClaims("alice", tenant)
		_, err := v.Verify(sign(t, "HS256", secret, "", c, tokenOpts{}))
		if !errors.Is(err, ErrInvalidToken) || errors.Is(err, names.ErrInvalidName) || !strings.Contains(err.Error(), "herald.tenant is not a valid tenant name") {
			t.Errorf("tenant %q: Verify error %v, want only ErrInvalidToken naming herald.tenant", tenant, err)
		}
		if err != nil && strings.Contains(err.Error(), tenant) && len(tenant) > 2 {
			t.Errorf("tenant %q: error %q echoes the tenant", tenant, err)
		}
		c.Channel = "orders/1"
		_, err = v.VerifySubscriptionClaims(context.Background(), sign(t, "HS256", secret, "", c, tokenOpts{}), &conn)
		if !errors.Is(err, ErrInvalidToken) || errors.Is(err, names.ErrInvalidName) || !strings.Contains(err.Error(), "herald.tenant is not a valid tenant name") {
			t.Errorf("tenant %q: VerifySubscriptionClaims error %v, want only ErrInvalidToken naming herald.tenant", tenant, err)
		}
	}
}

// mustRefuse fails t unless Verify answered (got, err) with a refusal
// that wraps ErrInvalidToken and names the check want.
func mustRefuse(t *testing.T, got *Claims, err error, want string) {
	t.Helper()
	if err == nil || got != nil {
		t.Fatalf("want failure %q, got claims %+v", want, got)
	}
	if !errors.Is(err, ErrInvalidToken) {
		t.Errorf("error %v does not wrap ErrInvalidToken", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the check %q", err, want)
	}
}
