package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
)

func writeRaw(t testing.TB, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// jwksServer serves a JWK Set that the test can swap, counting fetches.
type jwksServer struct {
	*httptest.Server
	doc     atomic.Pointer[[]byte]
	fail    atomic.Bool
	fetches atomic.Int64
}

func newJWKSServer(t *testing.T, keys ...testKey) *jwksServer {
	t.Helper()
	s := &jwksServer{}
	s.set(t, keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		if s.fail.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(*s.doc.Load())
	}))
	t.Cleanup(s.Close)
	return s
}

// fetched fails t unless s was fetched want times (for why).
func (s *jwksServer) fetched(t *testing.T, want int64, why string) {
	t.Helper()
	if n := s.fetches.Load(); n != want {
		t.Fatalf("%d fetches, want %d: %s", n, want, why)
	}
}

func (s *jwksServer) set(t *testing.T, keys ...testKey) {
	b := jwksJSON(t, keys...)
	s.doc.Store(&b)
}

// watchReloads reports every load attempt of v's key set that ends from
// now on, with its error; call it before v runs its loop.
func watchReloads(v *Verifier) <-chan error {
	ch := make(chan error, 16)
	report := v.jwks.onResult
	v.jwks.onResult = func(ok bool, n int, err error) {
		report(ok, n, err)
		ch <- err
	}
	return ch
}

// verifies fails t unless v accepts tok.
func verifies(t *testing.T, v *Verifier, tok, what string) {
	t.Helper()
	if _, err := v.Verify(tok); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestJWKSRotationFromURLWithoutRestart(t *testing.T) {
	a := newTestKey(t, "RS256", "key-a", 0)
	b := newTestKey(t, "ES256", "key-b", 0)
	srv := newJWKSServer(t, a)
	clock := newFakeClock()
	v, err := NewVerifier(Config{JWKS: srv.URL + "/jwks.json", JWKSRefresh: time.Hour, JWKSMinRefresh: 20 * time.Millisecond, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	if err := v.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	c := baseClaims("alice", "acme")
	tokA, tokB := signWith(t, a, c), signWith(t, b, c)
	verifies(t, v, tokA, "key a before rotation")
	if _, err := v.Verify(tokB); err == nil {
		t.Fatal("key b verified before it was published")
	}
	srv.set(t, b) // rotate: a withdrawn, b published
	if _, err := v.Verify(tokB); err == nil {
		t.Fatal("key b verified by a reload within JWKSMinRefresh of the last")
	}
	clock.Advance(20 * time.Millisecond)
	verifies(t, v, tokB, "unknown kid once JWKSMinRefresh passed")
	if _, err := v.Verify(tokA); err == nil || !strings.Contains(err.Error(), "unknown kid") {
		t.Fatalf("withdrawn key a: %v, want unknown kid", err)
	}
	srv.fetched(t, 2, "Start's and the one reload")
}

func TestJWKSServiceLoopReloads(t *testing.T) {
	a := newTestKey(t, "EdDSA", "key-a", 0)
	srv := newJWKSServer(t, a)
	clock := newFakeClock()
	v, err := NewVerifier(Config{JWKS: srv.URL, JWKSRefresh: time.Hour, JWKSMinRefresh: time.Hour, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ticks := make(chan time.Time)
	v.jwks.ticks = ticks
	reloads := watchReloads(v)
	if err := v.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := v.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start = %v, want ErrStarted", err)
	}
	if err := <-reloads; err != nil {
		t.Fatalf("Start's load: %v", err)
	}
	// The loop reloads on every interval, JWKSMinRefresh or not.
	for i := range 3 {
		ticks <- clock.Now()
		if err := <-reloads; err != nil {
			t.Fatalf("reload on interval %d: %v", i+1, err)
		}
	}
	srv.fetched(t, 4, "Start's and one an interval")
	v.Stop()
	v.Stop()
	select {
	case ticks <- clock.Now():
		t.Fatal("the loop still takes its intervals after Stop")
	default:
	}
}

func TestJWKSUnknownKidIsRateLimited(t *testing.T) {
	a := newTestKey(t, "ES384", "key-a", 0)
	srv := newJWKSServer(t, a)
	v, err := NewVerifier(Config{JWKS: srv.URL, JWKSRefresh: time.Hour, JWKSMinRefresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	if err := v.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		k := newTestKey(t, "ES384", fmt.Sprintf("random-%d", i), 0)
		_, err := v.Verify(signWith(t, k, baseClaims("alice", "acme")))
		if err == nil || !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), "unknown kid") {
			t.Fatalf("want unknown kid, got %v", err)
		}
	}
	srv.fetched(t, 1, "the first load, and none for 50 unknown kids")
}

func TestJWKSLazyLoadAndOutage(t *testing.T) {
	a := newTestKey(t, "PS256", "key-a", 1)
	srv := newJWKSServer(t, a)
	srv.fail.Store(true)
	clock := newFakeClock()
	v, err := NewVerifier(Config{JWKS: srv.URL, JWKSRefresh: 40 * time.Millisecond, JWKSMinRefresh: 10 * time.Millisecond, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	tok := signWith(t, a, baseClaims("alice", "acme"))
	if _, err := v.Verify(tok); err == nil || !strings.Contains(err.Error(), "key set unavailable") {
		t.Fatalf("JWKS down and never loaded: want key set unavailable, got %v", err)
	}
	srv.fail.Store(false)
	if _, err := v.Verify(tok); err == nil || !strings.Contains(err.Error(), "key set unavailable") {
		t.Fatalf("JWKS back within JWKSMinRefresh of the failed load: want key set unavailable, got %v", err)
	}
	clock.Advance(10 * time.Millisecond)
	verifies(t, v, tok, "lazy load without Start once the JWKS answers")
	srv.fail.Store(true)
	clock.Advance(39 * time.Millisecond)
	verifies(t, v, tok, "a set younger than JWKSRefresh")
	srv.fetched(t, 2, "the failed first load, the lazy load, no reload of a set younger than JWKSRefresh")
	clock.Advance(time.Millisecond)
	verifies(t, v, tok, "a failed reload of a stale set keeps its keys")
	srv.fetched(t, 3, "one reload attempt for the stale set")
}

func TestJWKSStartReportsFirstLoadFailure(t *testing.T) {
	srv := newJWKSServer(t)
	srv.fail.Store(true)
	v, err := NewVerifier(Config{JWKS: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	if err := v.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "HTTP status 503") {
		t.Fatalf("want the fetch failure, got %v", err)
	}
}

func TestJWKSFetchTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	v, err := NewVerifier(Config{JWKS: srv.URL, JWKSFetchTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	// Nothing but the fetch timeout ends the fetch: Start's context does
	// not, and the server answers only after the test.
	if err := v.Start(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a hanging JWKS: first load %v, want the fetch timeout", err)
	}
}

func TestJWKSFileRotation(t *testing.T) {
	a := newTestKey(t, "ES256", "file-a", 0)
	b := newTestKey(t, "RS384", "file-b", 1)
	path := writeJWKS(t, "", a)
	clock := newFakeClock()
	v, err := NewVerifier(Config{JWKS: "file://" + path, JWKSRefresh: time.Hour, JWKSMinRefresh: 10 * time.Millisecond, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	c := baseClaims("alice", "acme")
	verifies(t, v, signWith(t, a, c), "file key")
	writeJWKS(t, path, a, b)
	clock.Advance(10 * time.Millisecond)
	verifies(t, v, signWith(t, b, c), "file reload on unknown kid")
}

func TestParseJWKSSkipsUnusableKeys(t *testing.T) {
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	good := newTestKey(t, "EdDSA", "good", 0)
	ec := newTestKey(t, "ES256", "off-curve", 0)
	ec.jwk["y"] = ec.jwk["x"]
	encKey := newTestKey(t, "RS256", "enc", 0)
	encKey.jwk["use"] = "enc"
	mismatch := newTestKey(t, "ES256", "mismatch", 0)
	mismatch.jwk["alg"] = "RS256"
	bad := []map[string]string{
		{"kty": "RSA", "kid": "small", "n": b64u(small.N.Bytes()), "e": b64u(big.NewInt(int64(small.E)).Bytes())},
		{"kty": "RSA", "kid": "even-e", "n": encKey.jwk["n"], "e": b64u([]byte{2})},
		ec.jwk, encKey.jwk, mismatch.jwk,
		{"kty": "oct", "kid": "empty", "k": ""},
		{"kty": "OKP", "kid": "x448", "crv": "X448", "x": good.jwk["x"]},
		{"kty": "OKP", "kid": "short", "crv": "Ed25519", "x": b64u([]byte{1, 2, 3})},
		{"kty": "EC", "kid": "p224", "crv": "P-224", "x": "AA", "y": "AA"},
		{"kty": "XYZ", "kid": "odd"},
		{"kty": "oct", "kid": "padded", "k": "AAAA=="},
	}
	keys := append([]map[string]string{good.jwk}, bad...)
	doc, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	ks, skipped, err := parseJWKS(doc)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if ks.len() != 1 || len(ks.byKID["good"]) != 1 {
		t.Fatalf("want only the good key, got %d keys: %v", ks.len(), skipped)
	}
	if len(skipped) != len(bad) {
		t.Fatalf("want %d skipped, got %d: %v", len(bad), len(skipped), skipped)
	}
}

func TestJWKSStaleReloadDoesNotStallOthers(t *testing.T) {
	a := newTestKey(t, "ES256", "key-a", 0)
	hanging := make(chan struct{}, 4)
	release := make(chan struct{})
	var hang atomic.Bool
	doc := jwksJSON(t, a)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			hanging <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		_, _ = w.Write(doc)
	}))
	defer srv.Close()
	defer close(release)
	clock := newFakeClock()
	// Only the test's release ends the hanging reload, or the fetch
	// timeout if a caller waits for it.
	v, err := NewVerifier(Config{JWKS: srv.URL, JWKSRefresh: 20 * time.Millisecond, JWKSMinRefresh: time.Millisecond, JWKSFetchTimeout: time.Minute, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	tok := signWith(t, a, baseClaims("alice", "acme"))
	verifies(t, v, tok, "first load")
	hang.Store(true)
	clock.Advance(20 * time.Millisecond)
	if !v.jwks.stale() {
		t.Fatal("the set is not stale after JWKSRefresh")
	}
	first := make(chan error, 1)
	go func() { _, err := v.Verify(tok); first <- err }()
	select {
	case <-hanging:
	case err := <-first:
		t.Fatalf("verify of a stale set made no reload attempt: %v", err)
	}
	second := make(chan error, 1)
	go func() { _, err := v.Verify(tok); second <- err }()
	select {
	case err := <-second:
		if err != nil {
			t.Fatalf("verify with stale keys during a reload: %v", err)
		}
	case err := <-first:
		t.Fatalf("verify waited for another caller's reload, which ended first (%v)", err)
	}
	release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatalf("the reloading caller: %v", err)
	}
}

// TestJWKSRefusesSymmetricKeys: a key set that publishes a shared secret
// (kty "oct") does not let its readers mint tokens: an HS256 token signed
// with that secret is refused, with or without its kid, even when HS256
// is an accepted algorithm, from a URL and from a file; the set's other
// keys keep working, and the leak is logged loudly on every load. A set
// holding only symmetric keys has no usable key.
func TestJWKSRefusesSymmetricKeys(t *testing.T) {
	oct := newTestKey(t, "HS256", "shared", 0)
	ed := newTestKey(t, "EdDSA", "ed-1", 0)
	c := baseClaims("alice", "acme")
	srv := newJWKSServer(t, oct, ed)
	for name, loc := range map[string]string{"url": srv.URL + "/jwks.json", "file": writeJWKS(t, "", oct, ed)} {
		t.Run(name, func(t *testing.T) {
			var logs testenv.SyncBuffer
			v, err := NewVerifier(Config{
				JWKS: loc, Algorithms: SupportedAlgorithms(),
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Stop()
			if err := v.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, err := v.Verify(signWith(t, ed, c)); err != nil {
				t.Fatalf("the set's EdDSA key: %v", err)
			}
			for _, kid := range []string{oct.kid, ""} {
				_, err := v.Verify(sign(t, "HS256", oct.priv, kid, c, tokenOpts{}))
				if !errors.Is(err, ErrInvalidToken) {
					t.Fatalf("HS256 token signed with the set's oct key (kid %q) verified: %v", kid, err)
				}
			}
			if !strings.Contains(logs.String(), "symmetric (oct) keys") || !strings.Contains(logs.String(), "level=WARN") {
				t.Fatalf("no warning about the published secret in the logs:\n%s", logs.String())
			}
		})
	}
	_, err := NewVerifier(Config{JWKS: writeJWKS(t, "", oct), Algorithms: []string{"HS256"}})
	if err == nil || !strings.Contains(err.Error(), "symmetric (oct) keys are not accepted from a key set") {
		t.Fatalf("a set of only oct keys: %v, want no usable key naming the refusal", err)
	}
}
