package sqlitestore

import (
	"embed"

	"github.com/heraldgw/herald/outboxfeed/internal/storekit"
)

// SQLite schema. Timestamps are INTEGER microseconds since the Unix epoch
// (UTC); ids are canonical lower-case uuid text, generated in Go by the
// staging helpers (the column default generates a random v4 uuid for plain
// SQL inserts). seq is the rowid and gives per-channel order.
//
// Since migration 3 the outbox table holds only what producers write.
// SQLite has one partition, number 0: with a single writer the order of
// insertion is the order of visibility, so one position (outbox_partition.pos,
// the last seq completed) is exact. Since migration 5 each handler
// (outbox_handler; realtime always) has its own partition row, retry
// queue rows and batch log, all keyed by the handler first, and a record's
// lifecycle state for a handler is derived (see the outbox_record view,
// one row per record and handler):
//
//   - a record with a row in the handler's retry queue (outbox_retry) has
//     that row's state: pending (waiting for a retry or held back behind
//     one), dispatched or dead_letter;
//   - otherwise seq <= pos: dispatched, at the done_at of the completed
//     batch that covers it (outbox_batch);
//   - otherwise within the open claim (pos < seq <= claim_to) while its
//     lease lasts: processing;
//   - otherwise pending.
//
// The migrations are the files of migration/ (storekit.Migration).

//go:embed migration/*.sql
var migrationFiles embed.FS

// sqliteMigrations are the schema's migrations, in version order, and
// sqliteMigrationsErr why they could not be read (a file misnamed, or a
// directive that names no definition: a build mistake, which
// TestSQLiteMigrationFiles reports); every migration returns it.
var sqliteMigrations, sqliteMigrationsErr = storekit.ReadMigrations(migrationFiles, "migration")
