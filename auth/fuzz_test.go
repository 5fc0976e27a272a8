package auth

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzVerify feeds arbitrary strings to Verify: it must never panic, must
// return claims only for the genuinely signed seeds, and must never echo
// the input in its error.
func FuzzVerify(f *testing.F) {
	secret := []byte("fuzz-secret-0123456789abcdef0123")
	ec := newTestKey(f, "ES256", "fuzz-ec", 0)
	v, err := NewVerifier(Config{
		HMACSecret: secret,
		JWKS:       writeJWKS(f, filepath.Join(f.TempDir(), "jwks.json"), ec),
	})
	if err != nil {
		f.Fatal(err)
	}
	defer v.Stop()
	c := baseClaims("alice", "acme")
	valid := map[string]bool{
		sign(f, "HS256", secret, "", c, tokenOpts{}):      true,
		sign(f, "ES256", ec.priv, ec.kid, c, tokenOpts{}): true,
	}
	for tok := range valid {
		f.Add(tok)
		f.Add(tok[:len(tok)-1])
		f.Add(strings.Replace(tok, ".", "..", 1))
	}
	for _, s := range []string{
		"", ".", "..", "a.b.c", "eyJhbGciOiJub25lIn0.e30.", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.AAAA",
		"eyJhbGciOiJFUzI1NiIsImtpZCI6W119.e30.AA", "\x00\xff.\n.\t", strings.Repeat("A.", 100),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		claims, err := v.Verify(token)
		if err == nil {
			if claims == nil || claims.Subject == "" || claims.Tenant == "" {
				t.Fatalf("success without usable claims: %+v", claims)
			}
			if !valid[token] {
				t.Fatalf("claims returned for input that was never signed: %q", token)
			}
			return
		}
		if claims != nil {
			t.Fatalf("claims returned with error %v", err)
		}
		if !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("error %v does not wrap ErrInvalidToken", err)
		}
		for _, part := range strings.Split(token, ".") {
			if len(part) >= 12 && strings.Contains(err.Error(), part) {
				t.Fatalf("error %q echoes the input", err)
			}
		}
	})
}

// FuzzParseJWKS feeds arbitrary documents to the JWK Set parser: it must
// never panic, and every key it accepts must fit at least one algorithm.
func FuzzParseJWKS(f *testing.F) {
	ed := newTestKey(f, "EdDSA", "ed", 0)
	ec := newTestKey(f, "ES384", "ec", 0)
	rs := newTestKey(f, "RS256", "rs", 0)
	oct := newTestKey(f, "HS256", "oct", 0)
	f.Add(jwksJSON(f, ed, ec, rs, oct))
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"","y":""}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`))
	f.Add([]byte(`{"keys":null}`))
	f.Add([]byte(`{"keys":[1,"x",{}]}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		ks, _, err := parseJWKS(doc)
		if err != nil {
			return
		}
		for _, k := range ks.all {
			fitsOne := false
			for _, alg := range SupportedAlgorithms() {
				fitsOne = fitsOne || k.fits(alg)
			}
			if !fitsOne {
				t.Fatalf("accepted key %q fits no algorithm", k.kid)
			}
		}
	})
}
