package main

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldgw/herald/outboxfeed/outboxdb"
)

// restartLease is the outbox lease of TestRestartAfterStopDeliversAtOnce:
// far longer than the test, so a record the restarted node delivers was
// not waiting for a lease of the stopped one to expire.
const restartLease = "10m"

// TestRestartAfterStopDeliversAtOnce: `herald serve` stopped gracefully
// (SIGTERM ends its context) while its Worker works through a backlog
// leaves no partition leased and no claim open for the next holder to
// take over (a batch claimed as the stop came is given back as claimed),
// and the restarted node delivers the rest of the backlog, and a record
// staged after the restart, without waiting for the stopped node's
// leases to expire. On both stores.
func TestRestartAfterStopDeliversAtOnce(t *testing.T) {
	for _, sc := range storeCases() {
		t.Run(sc.name, func(t *testing.T) {
			dbURL, st := sc.setup(t)
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--jwt-hmac-secret", testSecret,
				"--data-dir", t.TempDir(), "--outbox-poll-interval", "50ms", "--log-level", "warn",
				"--outbox-lease", restartLease, "--outbox-batch-size", "2"}, storeArgs(dbURL)...)
			first := serveAt(t, args)
			store, err := outboxdb.Open(context.Background(), outboxdb.Config{DatabaseURL: dbURL})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			var ids []string
			for i := range 60 {
				ids = append(ids, st.stage(t, notification("acme", fmt.Sprintf("orders/%d", i%3), `{"n":1}`), true))
			}
			waitDispatched(t, store, ids[0]) // the Worker is working through the backlog
			first.stop(t, 30*time.Second)
			if n := leasesHeld(t, dbURL); n != 0 {
				t.Fatalf("%d partition leases outlive the graceful stop", n)
			}
			if n := claimsOpen(t, dbURL); n != 0 {
				t.Fatalf("%d claims left open by the graceful stop: the next holder would take them over", n)
			}

			second := serveAt(t, args)
			defer second.stop(t, 30*time.Second)
			ids = append(ids, st.stage(t, notification("acme", "orders/1", `{"n":2}`), true))
			for _, id := range ids {
				waitDispatched(t, store, id) // a minute at most, far below the lease
			}
		})
	}
}

// serveAt runs herald with args (a serve command) in-process until it
// prints its address.
func serveAt(t *testing.T, args []string) *inProcess {
	t.Helper()
	p := startInProcess(args)
	p.waitUntil(t, 30*time.Second, "its address", func() bool { return listenRE.MatchString(p.out.String()) })
	return p
}

// leasesHeld counts the partitions of dbURL's outbox whose lease has not
// ended.
func leasesHeld(t *testing.T, dbURL string) int {
	t.Helper()
	return countPartitions(t, dbURL, `expires_at > clock_timestamp()`, `expires_at > ?1`)
}

// claimsOpen counts the partitions of dbURL's outbox with a claim that
// was never completed nor given back: the next claim takes it over.
func claimsOpen(t *testing.T, dbURL string) int {
	t.Helper()
	return countPartitions(t, dbURL, `open`, `claim_to IS NOT NULL`)
}

// countPartitions counts the rows of dbURL's outbox_partition that match
// pgWhere (PostgreSQL) or sqliteWhere (SQLite; ?1 is the time now, in
// microseconds).
func countPartitions(t *testing.T, dbURL, pgWhere, sqliteWhere string) int {
	t.Helper()
	ctx := context.Background()
	var n int
	if outboxdb.IsPostgresURL(dbURL) {
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM herald.outbox_partition WHERE `+pgWhere).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	db, err := sql.Open("sqlite", "file:"+dbURL+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM outbox_partition WHERE `+sqliteWhere, time.Now().UnixMicro()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
