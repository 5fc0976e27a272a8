package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/internal/testenv"
)

func TestRevokeAndList(t *testing.T) {
	cases := map[string]func(t *testing.T) []string{
		"sqlite":   func(t *testing.T) []string { return []string{"--data-dir", filepath.Join(t.TempDir(), "d")} },
		"postgres": func(t *testing.T) []string { return []string{"--database-url", testenv.DatabaseURL(t), "--no-redis"} },
		"redis": func(t *testing.T) []string {
			u, prefix := testenv.Redis(t)
			return []string{"--redis-url", u, "--redis-key-prefix", prefix, "--data-dir", t.TempDir()}
		},
	}
	for name, where := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			common := where(t)
			var out, errOut strings.Builder
			if code := run(ctx, append([]string{"revoke", "--sid", "sess-42", "--reason", "stolen laptop", "--for", "2h"}, common...), &out, &errOut); code != 0 {
				t.Fatalf("revoke exit %d: %s", code, errOut.String())
			}
			if !strings.Contains(out.String(), "revoked session sess-42") {
				t.Fatalf("revoke said %q", out.String())
			}
			out.Reset()
			if code := run(ctx, append([]string{"revoke", "list"}, common...), &out, &errOut); code != 0 {
				t.Fatalf("list exit %d: %s", code, errOut.String())
			}
			if !strings.Contains(out.String(), "sid") || !strings.Contains(out.String(), "sess-42") || !strings.Contains(out.String(), "stolen laptop") {
				t.Fatalf("list:\n%s", out.String())
			}
		})
	}
}

func TestRevokeUsage(t *testing.T) {
	for _, args := range [][]string{
		{"revoke"},
		{"revoke", "--sid", "a", "--jti", "b"},
		{"revoke", "--sid", "a", "--for", "-1h"},
	} {
		var out, errOut strings.Builder
		if code := run(context.Background(), append(args, "--data-dir", t.TempDir()), &out, &errOut); code != 2 {
			t.Fatalf("%v: exit %d, want 2 (%s)", args, code, errOut.String())
		}
	}
}

// TestRevokeRefusesAmbiguousStore: with a PostgreSQL --database-url and no
// --redis-url, revoke cannot know whether the nodes read PostgreSQL or
// Redis, so it refuses and names the flags that decide.
func TestRevokeRefusesAmbiguousStore(t *testing.T) {
	db := testenv.DatabaseURL(t)
	redisURL, prefix := testenv.Redis(t)
	for name, args := range map[string][]string{
		"postgres without redis":  {"revoke", "--sid", "s1", "--database-url", db},
		"list without redis":      {"revoke", "list", "--database-url", db},
		"no-redis with redis-url": {"revoke", "--sid", "s1", "--database-url", db, "--no-redis", "--redis-url", redisURL, "--redis-key-prefix", prefix},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errOut strings.Builder
			if code := run(context.Background(), args, &out, &errOut); code != 2 {
				t.Fatalf("exit %d, want 2; stdout %q stderr %q", code, out.String(), errOut.String())
			}
			if out.Len() != 0 {
				t.Errorf("reported something on a refusal: %q", out.String())
			}
			for _, want := range []string{"--redis-url", "--no-redis"} {
				if !strings.Contains(errOut.String(), want) {
					t.Errorf("message does not name %s: %s", want, errOut.String())
				}
			}
		})
	}
}

// TestRevokeWithNodeConfigCutsConnection runs a node on PostgreSQL and
// Redis from a config file, opens a stream with a session's token, and
// revokes the session with `herald revoke --config` of the same file: the
// revocation lands in Redis, where the node reads it, and the stream is
// cut as revoked. The flag-only form that used to write to PostgreSQL
// (--database-url alone) is refused.
func TestRevokeWithNodeConfigCutsConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := testenv.DatabaseURL(t)
	redisURL, prefix := testenv.Redis(t)
	cfg, err := json.Marshal(map[string]any{
		"database-url": db, "redis-url": redisURL, "redis-key-prefix": prefix,
		"revalidate-interval": "100ms", "max-connections": 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "herald.json")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	base := startServe(t, "--config", cfgPath)

	tok, err := auth.MintHS256([]byte(testSecret), auth.Claims{
		Subject: "u1", Tenant: "acme", Subscribe: []string{"orders/*"}, SessionID: "sess-cut",
		ExpiresAt: time.Now().Add(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := openSSE(t, base+"/v1/sse?channel=orders/1", tok, "")
	defer s.Close()
	if s.Status != http.StatusOK {
		t.Fatalf("SSE status %d: %s", s.Status, s.Body)
	}
	s.next(t, 5*time.Second) // subscribed

	var out, errOut strings.Builder
	if code := run(ctx, []string{"revoke", "--sid", "sess-cut", "--database-url", db}, &out, &errOut); code != 2 {
		t.Fatalf("revoke with only --database-url: exit %d, want 2 (%s%s)", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run(ctx, []string{"revoke", "--config", cfgPath, "--sid", "sess-cut", "--for", "1h"}, &out, &errOut); code != 0 {
		t.Fatalf("revoke --config: exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "stored in redis") {
		t.Fatalf("revoke --config did not use Redis: %q", out.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev := s.next(t, time.Until(deadline))
		if ev.Event == "disconnect" {
			if !strings.Contains(ev.Data, "revoked") {
				t.Fatalf("disconnect is not revoked: %s", ev.Data)
			}
			return
		}
	}
}
