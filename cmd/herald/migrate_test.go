package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
)

// TestMigrateTo takes the outbox schema back one step and forward again
// with herald migrate --to, on both stores, and refuses a step that
// cannot go back with the advice of docs/runbooks/rollback-schema.md.
func TestMigrateTo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		db         []string
		back       string
		refuse     string
		refuseWith []string
	}{
		{"sqlite", []string{"--data-dir", filepath.Join(t.TempDir(), "data")}, "3", "2",
			[]string{"migration 3 (outbox partition batches) cannot be reversed", `sqlite3 `, "DROP VIEW outbox_record;"}},
		{"postgres", []string{"--database-url", testenv.DatabaseURL(t)}, "6", "5",
			[]string{"migration 6 (ranges in staging order) cannot be reversed", `ALTER SCHEMA herald RENAME TO herald_v6`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cmd := func(args ...string) []string {
				return append(append([]string{"migrate", "--log-level", "warn", "--create-data-dir"}, c.db...), args...)
			}
			mustHerald(t, cmd()...)
			out := mustHerald(t, cmd("--to", c.back)...)
			m := regexp.MustCompile(`^outbox schema taken back from version (\d+) to ` + c.back + ` in `).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("migrate --to %s: %q", c.back, out)
			}
			last := m[1]
			wantRefused(t, 1, append([]string{"schema rollback refused", "docs/runbooks/rollback-schema.md",
				`herald outbox stats says "oldest waiting record: none"`}, c.refuseWith...), cmd("--to", c.refuse)...)
			if out := mustHerald(t, cmd("--to", last)...); !strings.Contains(out, "outbox schema taken from version "+c.back+" to "+last) {
				t.Fatalf("migrate --to %s: %q", last, out)
			}
			if out := mustHerald(t, cmd()...); !strings.Contains(out, "outbox schema is up to date") {
				t.Fatalf("migrate: %q", out)
			}
		})
	}
}
