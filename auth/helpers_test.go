package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// testKey is a signing key generated for the tests and its public JWK.
type testKey struct {
	kid  string
	alg  string
	priv any // []byte, *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey
	jwk  map[string]string
}

var (
	rsaOnce sync.Once
	rsaKeys [2]*rsa.PrivateKey
)

// rsaKey returns one of two 2048-bit RSA keys generated once per run.
func rsaKey(t testing.TB, i int) *rsa.PrivateKey {
	t.Helper()
	rsaOnce.Do(func() {
		for j := range rsaKeys {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			rsaKeys[j] = k
		}
	})
	return rsaKeys[i]
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func padded(n *big.Int, size int) []byte {
	b := make([]byte, size)
	return n.FillBytes(b)
}

// newTestKey makes a key for alg named kid. RSA keys come from the shared
// pair (index rsaIdx); the others are generated fresh.
func newTestKey(t testing.TB, alg, kid string, rsaIdx int) testKey {
	t.Helper()
	k := testKey{kid: kid, alg: alg, jwk: map[string]string{"kid": kid, "use": "sig"}}
	switch alg {
	case "HS256", "HS384", "HS512":
		secret := make([]byte, 48)
		_, _ = rand.Read(secret)
		k.priv = secret
		k.jwk["kty"], k.jwk["k"] = "oct", b64u(secret)
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
		p := rsaKey(t, rsaIdx)
		k.priv = p
		k.jwk["kty"] = "RSA"
		k.jwk["n"] = b64u(p.N.Bytes())
		k.jwk["e"] = b64u(big.NewInt(int64(p.E)).Bytes())
	case "ES256", "ES384", "ES512":
		curve := map[string]elliptic.Curve{"ES256": elliptic.P256(), "ES384": elliptic.P384(), "ES512": elliptic.P521()}[alg]
		crv := map[string]string{"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}[alg]
		p, err := ecdsa.GenerateKey(curve, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		size := (curve.Params().BitSize + 7) / 8
		k.priv = p
		k.jwk["kty"], k.jwk["crv"] = "EC", crv
		k.jwk["x"] = b64u(padded(p.X, size))
		k.jwk["y"] = b64u(padded(p.Y, size))
	case "EdDSA":
		pub, p, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		k.priv = p
		k.jwk["kty"], k.jwk["crv"], k.jwk["x"] = "OKP", "Ed25519", b64u(pub)
	default:
		t.Fatalf("no test key for %s", alg)
	}
	return k
}

// public returns the key's public half as a crypto.PublicKey.
func (k testKey) public() crypto.PublicKey {
	switch p := k.priv.(type) {
	case *rsa.PrivateKey:
		return &p.PublicKey
	case *ecdsa.PrivateKey:
		return &p.PublicKey
	case ed25519.PrivateKey:
		return p.Public()
	}
	return nil
}

// jwksJSON renders keys as a JWK Set document.
func jwksJSON(t testing.TB, keys ...testKey) []byte {
	t.Helper()
	doc := struct {
		Keys []map[string]string `json:"keys"`
	}{Keys: []map[string]string{}}
	for _, k := range keys {
		doc.Keys = append(doc.Keys, k.jwk)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeJWKS writes keys to a file in a temp dir and returns its path.
func writeJWKS(t testing.TB, path string, keys ...testKey) string {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "jwks.json")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, jwksJSON(t, keys...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// tokenClaims builds the JWT claims for c plus the registered extras.
type tokenOpts struct {
	iss    string
	aud    []string
	nbf    time.Time
	noExp  bool
	header map[string]any
}

func baseClaims(sub, tenant string) Claims {
	return Claims{
		Subject:   sub,
		Tenant:    tenant,
		Subscribe: []string{"orders/*", "users/{sub}/**"},
		ExpiresAt: time.Now().Add(time.Hour),
		SessionID: "sess-1",
		TokenID:   "tok-1",
	}
}

// sign mints a token for c with key k (k.alg, k.kid), or with method alg
// and raw key when given, applying opts.
func sign(t testing.TB, alg string, key any, kid string, c Claims, o tokenOpts) string {
	t.Helper()
	jc := jwtClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:  c.Subject,
			ID:       c.TokenID,
			Issuer:   o.iss,
			Audience: o.aud,
		},
		SessionID: c.SessionID,
		Herald: &heraldClaim{
			Tenant: c.Tenant, Subscribe: c.Subscribe, Publish: c.Publish, Channel: c.Channel,
		},
	}
	if !o.noExp {
		jc.ExpiresAt = jwt.NewNumericDate(c.ExpiresAt)
	}
	if !o.nbf.IsZero() {
		jc.NotBefore = jwt.NewNumericDate(o.nbf)
	}
	m := jwt.GetSigningMethod(alg)
	if m == nil {
		t.Fatalf("unknown alg %s", alg)
	}
	tok := jwt.NewWithClaims(m, jc)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	for k, v := range o.header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("sign %s: %v", alg, err)
	}
	return s
}

// signWith signs c with test key k.
func signWith(t testing.TB, k testKey, c Claims) string {
	t.Helper()
	return sign(t, k.alg, k.priv, k.kid, c, tokenOpts{})
}

// fakeClock is a clock the test moves, starting at the time it was made.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
