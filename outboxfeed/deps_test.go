package outboxfeed_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
)

// TestStoresLinkOnlyTheirDriver: a program that uses one store links that
// store's database driver and not the other's, and the Worker links
// neither (go list -deps, tests excluded).
func TestStoresLinkOnlyTheirDriver(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	testenv.Must(t, err, "find the go command")
	deps := func(pkg string) string {
		out, err := exec.Command(goBin, "list", "-deps", pkg).CombinedOutput()
		testenv.Must(t, err, "go list -deps "+pkg+": "+string(out))
		return string(out)
	}
	const pgx, sqlite = "github.com/jackc/pgx/v5\n", "modernc.org/sqlite\n"
	for _, c := range []struct {
		pkg        string
		want, none []string
	}{
		{"github.com/heraldgw/herald/outboxfeed", nil, []string{pgx, sqlite}},
		{"github.com/heraldgw/herald/outboxfeed/pgstore", []string{pgx}, []string{sqlite}},
		{"github.com/heraldgw/herald/outboxfeed/sqlitestore", []string{sqlite}, []string{pgx}},
	} {
		got := deps(c.pkg)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s does not link %s", c.pkg, strings.TrimSpace(w))
			}
		}
		for _, n := range c.none {
			if strings.Contains(got, n) {
				t.Errorf("%s links %s", c.pkg, strings.TrimSpace(n))
			}
		}
	}
}
