package pgstore

import (
	"context"
	"os/exec"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed/storetest"
)

func TestPostgresFixtureUpgradesInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	if out, err := exec.CommandContext(ctx, testenv.PGTool(t, "psql"), "-q", "-v", "ON_ERROR_STOP=1",
		"-f", "testdata/pg-v6.sql", url).CombinedOutput(); err != nil {
		t.Fatalf("load the fixture: %v\n%s", err, out)
	}
	s, err := Open(ctx, Config{URL: url})
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = s.Close() })
	// The fixture's transaction ids come from a fresh cluster: this one
	// must have counted past them (a long-lived one has).
	for {
		var behind bool
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT max(pg_snapshot_xmax(lo)) >= pg_snapshot_xmax(pg_current_snapshot())
			FROM herald.outbox_partition`).Scan(&behind), "compare xids")
		if !behind {
			break
		}
		_, err := s.Pool().Exec(ctx, `SELECT pg_current_xact_id()`)
		testenv.Must(t, err, "take an xid")
	}
	storetest.CheckFixture(t, s, "testdata/pg-v6-ids.json", func() {
		_, err := s.Pool().Exec(ctx, `UPDATE herald.outbox_retry SET next_attempt_at = now() WHERE state = 'pending'`)
		testenv.Must(t, err, "make the retry due")
	})
}
