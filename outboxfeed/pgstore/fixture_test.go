package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os/exec"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed/storetest"
)

// v6Migrations are the SHA-256 of the migration files that build the
// schema testdata/pg-v6-data.sql is loaded into: the schema Herald wrote
// at version 6 before its migrations were files. A file released once
// never changes; if one of these does, the fixture no longer starts from
// what databases in the field hold.
var v6Migrations = map[string]string{
	"001_outbox.up.sql":                                "308b9b6114f71101f7d9421eb9cca7dbbc6148ab8a49b71fed2a10e5cbcc7588",
	"002_outbox_channel_heads.up.sql":                  "ce809491fbd4c56855380c7e7d9a82bf43d802fb79e17bff61aa0fb94b9e2cff",
	"003_partition_leases_and_snapshot_batches.up.sql": "7c38ce331de01297d1b95bac22b6e8087a7b0695d01f2c0fad811238794d365f",
	"004_time_ordered_ids.up.sql":                      "83e1b00c4467b08ae2c9dea4de17a9c2164c48739ccf129429fdc2d78c14d7b1",
	"005_archived_segments.up.sql":                     "cd9eb0e44ebf6f624db5882d8c12a6700401ac85a8d832aa275cc3455c239449",
	"006_ranges_in_staging_order.up.sql":               "fd864c340cde3ff4f9dcd3ffb286f6828312d7b600b379c37658a2c168023f55",
}

func TestPostgresFixtureUpgradesInPlace(t *testing.T) {
	t.Parallel()
	for name, want := range v6Migrations {
		b, err := fs.ReadFile(migrationFiles, "migration/"+name)
		testenv.Must(t, err, "read "+name)
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != want {
			t.Fatalf("migration %s changed since it was released", name)
		}
	}
	ctx := context.Background()
	s, url := newPGStoreAt(t, 6)
	if out, err := exec.CommandContext(ctx, testenv.PGTool(t, "psql"), "-q", "-v", "ON_ERROR_STOP=1",
		"-f", "testdata/pg-v6-data.sql", url).CombinedOutput(); err != nil {
		t.Fatalf("load the fixture: %v\n%s", err, out)
	}
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
