package outboxfeed_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
)

// TestStoresLinkOnlyTheirDriver: a program that uses one store links that
// store's database driver and no other driver (not the other store's, not
// go-redis: the Redis broker is in fanout/redisbroker), the Worker links
// none, and a producer that only stages (outboxfeed/stage) links pgx and
// nothing of SQLite, go-redis or Prometheus (go list -deps, tests excluded).
func TestStoresLinkOnlyTheirDriver(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	testenv.Must(t, err, "find the go command")
	deps := func(pkg string) string {
		out, err := exec.Command(goBin, "list", "-deps", pkg).CombinedOutput()
		testenv.Must(t, err, "go list -deps "+pkg+": "+string(out))
		return string(out)
	}
	const (
		pgx        = "github.com/jackc/pgx/v5\n"
		sqlite     = "modernc.org/sqlite\n"
		redis      = "github.com/redis/go-redis/v9\n"
		prometheus = "github.com/prometheus/client_golang/prometheus\n"
	)
	for _, c := range []struct {
		pkg        string
		want, none []string
	}{
		{"github.com/heraldgw/herald/outboxfeed", nil, []string{pgx, sqlite, redis}},
		{"github.com/heraldgw/herald/outboxfeed/pgstore", []string{pgx}, []string{sqlite, redis}},
		{"github.com/heraldgw/herald/outboxfeed/sqlitestore", []string{sqlite}, []string{pgx, redis}},
		{"github.com/heraldgw/herald/outboxfeed/stage", []string{pgx}, []string{sqlite, redis, prometheus}},
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
