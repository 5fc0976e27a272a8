package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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

// TestRevokeRefusesContradictorySettings: --no-redis with --redis-url
// is refused, naming both.
func TestRevokeRefusesContradictorySettings(t *testing.T) {
	db := testenv.DatabaseURL(t)
	redisURL, prefix := testenv.Redis(t)
	for name, args := range map[string][]string{
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
// Redis from a config file, opens streams with two sessions' tokens, and
// revokes one session with `herald revoke --config` of the same file (the
// revocation lands in PostgreSQL and Redis) and the other with
// --database-url alone (PostgreSQL only, which the node reads too): both
// streams are cut as revoked.
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

	for _, c := range []struct {
		sid, stored string
		args        []string
	}{
		{"sess-config", "stored in postgresql and redis", []string{"--config", cfgPath, "--for", "1h"}},
		{"sess-database", "stored in postgresql)", []string{"--database-url", db}},
	} {
		tok, err := auth.MintHS256([]byte(testSecret), auth.Claims{
			Subject: "u1", Tenant: "acme", Subscribe: []string{"orders/*"}, SessionID: c.sid,
			ExpiresAt: time.Now().Add(time.Hour),
		})
		if err != nil {
			t.Fatal(err)
		}
		s := subscribeSSE(t, base+"/v1/sse?channel=orders/1", tok, "")
		defer s.Close()

		var out, errOut strings.Builder
		if code := run(ctx, append([]string{"revoke", "--sid", c.sid}, c.args...), &out, &errOut); code != 0 {
			t.Fatalf("revoke %v: exit %d: %s", c.args, code, errOut.String())
		}
		if !strings.Contains(out.String(), c.stored) {
			t.Fatalf("revoke %v said %q, want %q", c.args, out.String(), c.stored)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			ev := s.next(t, time.Until(deadline))
			if ev.Event == "disconnect" {
				if !strings.Contains(ev.Data, "revoked") {
					t.Fatalf("disconnect is not revoked: %s", ev.Data)
				}
				break
			}
		}
	}
}

// postTicket does POST /v1/tickets on base with tok and returns the status
// and body.
func postTicket(t *testing.T, base, tok string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/tickets", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// snapshotAt reads herald_revocations_snapshot_timestamp_seconds of base.
func snapshotAt(t *testing.T, base string) float64 {
	t.Helper()
	return metricValue(t, base, "herald_revocations_snapshot_timestamp_seconds")
}

// metricValue reads the unlabelled sample name from base's /metrics.
func metricValue(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// TestRevocationSurvivesRedisRestart: a node on PostgreSQL and Redis; a
// session is revoked with the nodes' settings; Redis restarts without
// persistence and comes back empty. Once the node has read the revocation
// list again, the revoked session still gets no ticket and no stream: the
// revocation is kept in PostgreSQL too.
func TestRevocationSurvivesRedisRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	db := testenv.DatabaseURL(t)
	redisSrv := testenv.StartRedis(t)
	args := []string{"--database-url", db, "--redis-url", redisSrv.URL(), "--revalidate-interval", "100ms"}
	base := startServe(t, args...)
	tokFor := func(sid string) string {
		tok, err := auth.MintHS256([]byte(testSecret), auth.Claims{
			Subject: "u1", Tenant: "acme", Subscribe: []string{"orders/*"}, SessionID: sid,
			ExpiresAt: time.Now().Add(time.Hour),
		})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	revoked, other := tokFor("sess-revoked"), tokFor("sess-other")
	var out, errOut strings.Builder
	if code := run(ctx, []string{"revoke", "--sid", "sess-revoked", "--database-url", db, "--redis-url", redisSrv.URL()}, &out, &errOut); code != 0 {
		t.Fatalf("revoke: exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "stored in postgresql and redis") {
		t.Fatalf("revoke said %q", out.String())
	}
	waitTicket := func(tok string, want int) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			status, body := postTicket(t, base, tok)
			if status == want {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("POST /v1/tickets: %d %s, want %d", status, body, want)
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if body := waitTicket(revoked, http.StatusUnauthorized); !strings.Contains(body, "revoked") {
		t.Fatalf("before the restart: %s", body)
	}

	redisSrv.Restart()
	restarted := float64(time.Now().UnixNano()) / 1e9
	waitTicket(other, http.StatusOK) // Redis answers the node again
	deadline := time.Now().Add(30 * time.Second)
	for snapshotAt(t, base) <= restarted {
		if time.Now().After(deadline) {
			t.Fatal("the node took no revocation snapshot after the restart")
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	status, body := postTicket(t, base, revoked)
	if status != http.StatusUnauthorized || !strings.Contains(body, "revoked") {
		t.Fatalf("after Redis lost its data the revoked session got %d %s, want 401 revoked", status, body)
	}
	s := openSSE(t, base+"/v1/sse?channel=orders/1", revoked, "")
	defer s.Close()
	if s.Status != http.StatusUnauthorized {
		t.Fatalf("SSE with the revoked session after the restart: %d %s", s.Status, s.Body)
	}
	out.Reset()
	if code := run(ctx, []string{"revoke", "list", "--database-url", db, "--redis-url", redisSrv.URL()}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "sess-revoked") {
		t.Fatalf("revoke list after the restart: exit %d: %s%s", code, out.String(), errOut.String())
	}
}
