package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
)

func TestRevokeAndList(t *testing.T) {
	cases := map[string]func(t *testing.T) []string{
		"sqlite":   func(t *testing.T) []string { return []string{"--data-dir", filepath.Join(t.TempDir(), "d")} },
		"postgres": func(t *testing.T) []string { return []string{"--database-url", testenv.DatabaseURL(t)} },
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
