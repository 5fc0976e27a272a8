package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
)

// signedHook is an authorization webhook that allows only requests whose
// Standard Webhooks signature it verifies with its own key, and records
// their bodies.
type signedHook struct {
	*httptest.Server
	mu       sync.Mutex
	verified []map[string]string
	refused  int
}

func newSignedHook(t *testing.T, key []byte) *signedHook {
	t.Helper()
	h := &signedHook{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		mac := hmac.New(sha256.New, key)
		fmt.Fprintf(mac, "%s.%s.%s", id, ts, body)
		want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
		sec, err := strconv.ParseInt(ts, 10, 64)
		fresh := err == nil && time.Since(time.Unix(sec, 0)).Abs() < 5*time.Minute
		ok := fresh && id != ""
		if ok {
			ok = false
			for _, sig := range strings.Fields(r.Header.Get("webhook-signature")) {
				if hmac.Equal([]byte(sig), []byte(want)) {
					ok = true
				}
			}
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if !ok {
			h.refused++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var fields map[string]string
		_ = json.Unmarshal(body, &fields)
		h.verified = append(h.verified, fields)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"allow":true,"ttl_seconds":60}`))
	}))
	t.Cleanup(h.Close)
	return h
}

// TestServeAccessSettings: herald serve wires the access settings:
// --max-token-lifetime refuses a longer-lived token, --max-tickets-per-user
// bounds one user's tickets with a 429 naming it, and
// --authz-webhook-secret-file signs the webhook's requests (verified by a
// receiver of its own), which carry sid and jti.
func TestServeAccessSettings(t *testing.T) {
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i)
	}
	secretFile := filepath.Join(t.TempDir(), "authz.whsec")
	if err := os.WriteFile(secretFile, []byte("whsec_"+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hook := newSignedHook(t, key)
	base := startServe(t, "--max-token-lifetime", "1h", "--max-tickets-per-user", "2",
		"--authz-webhook", hook.URL, "--authz-webhook-secret-file", secretFile, "--connect-attempts-per-ip", "-1")
	mintFor := func(life time.Duration) string {
		tok, err := auth.MintHS256([]byte(testSecret), auth.Claims{
			Subject: "u1", Tenant: "acme", Subscribe: []string{"orders/*"}, SessionID: "sess-1", TokenID: "jti-1",
			ExpiresAt: time.Now().Add(life), IssuedAt: time.Now(),
		})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	long := openSSE(t, base+"/v1/sse?channel=orders/1", mintFor(2*time.Hour), "")
	if long.Status != http.StatusUnauthorized || !strings.Contains(string(long.Body), "longest accepted token lifetime (1h0m0s)") {
		t.Fatalf("a 2h token under --max-token-lifetime 1h: %d %s", long.Status, long.Body)
	}

	tok := mintFor(30 * time.Minute)
	for i := range 2 {
		if status, body := postTicket(t, base, tok); status != http.StatusOK {
			t.Fatalf("ticket %d: %d %s", i+1, status, body)
		}
	}
	if status, body := postTicket(t, base, tok); status != http.StatusTooManyRequests || !strings.Contains(body, "--max-tickets-per-user (2)") {
		t.Fatalf("third ticket: %d %s, want 429 naming --max-tickets-per-user (2)", status, body)
	}

	s := openSSE(t, base+"/v1/sse?channel=docs/1", tok, "")
	defer s.Close()
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if s.Status != http.StatusOK {
		t.Fatalf("a channel the signed webhook allows: %d %s (webhook refused %d)", s.Status, s.Body, hook.refused)
	}
	if len(hook.verified) != 1 || hook.verified[0]["sid"] != "sess-1" || hook.verified[0]["jti"] != "jti-1" || hook.verified[0]["channel"] != "docs/1" {
		t.Fatalf("verified webhook calls %v, want one for docs/1 with sid and jti", hook.verified)
	}
}

// TestRevokeKeepsRevocationsAsLongAsTokensLive: herald revoke keeps a
// revocation for --max-token-lifetime by default (24h), following the
// setting the nodes share, so it outlives every token they accept.
func TestRevokeKeepsRevocationsAsLongAsTokensLive(t *testing.T) {
	until := regexp.MustCompile(`until (\S+Z)`)
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 24 * time.Hour},
		{[]string{"--max-token-lifetime", "72h"}, 72 * time.Hour},
		{[]string{"--max-token-lifetime", "72h", "--for", "2h"}, 2 * time.Hour},
	} {
		var out, errOut strings.Builder
		args := append([]string{"revoke", "--sid", "s-" + strconv.Itoa(len(c.args)), "--data-dir", t.TempDir()}, c.args...)
		before := time.Now()
		if code := run(context.Background(), args, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
		}
		m := until.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("%v said %q", args, out.String())
		}
		u, err := time.Parse(time.RFC3339, m[1])
		if err != nil {
			t.Fatal(err)
		}
		if got := u.Sub(before); got < c.want-time.Second || got > c.want+time.Minute {
			t.Fatalf("%v: revoked for %s, want %s", c.args, got, c.want)
		}
	}
}
