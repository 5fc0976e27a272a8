package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"
)

// SchemaVersion is the version of the schema in the file: the number of
// migrations applied (0 before the first).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	return storekit.SchemaVersion(ctx, func(ctx context.Context) (applied []int, err error) {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			applied, err = sqliteApplied(ctx, tx)
			return err
		})
		return applied, err
	})
}

// MigrateTo takes the schema to version: up as Migrate does when the file
// is older, back when it is newer. Going back reverses the steps from the
// newest on, in one transaction, each with its down step
// (migration/NNN_name.down.sql). It refuses, wrapping
// outboxfeed.ErrRollbackRefused, when a step on the way has no down step
// (the message says how to run the older release instead) or its check
// (NNN_name.downcheck.sql) names a reason not to now. Stop every Worker
// of this release first.
func (s *Store) MigrateTo(ctx context.Context, version int) error {
	if sqliteMigrationsErr != nil {
		return fmt.Errorf("outboxfeed: migrate sqlite: %w", sqliteMigrationsErr)
	}
	return storekit.MigrateTo(ctx, version, len(sqliteMigrations), s.SchemaVersion, s.migrate, s.migrateBack)
}

// migrateBack takes the schema back to version, below the current one.
func (s *Store) migrateBack(ctx context.Context, version int) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		applied, err := sqliteApplied(ctx, tx)
		if err != nil {
			return err
		}
		return storekit.Down(ctx, sqliteDownTx{tx}, sqliteMigrations, applied, version,
			`DELETE FROM schema_migrations WHERE version = ?`, s.irreversibleAdvice, s.log)
	})
	if err != nil {
		if errors.Is(err, outboxfeed.ErrRollbackRefused) {
			return err
		}
		return fmt.Errorf("outboxfeed: migrate sqlite back to %d: %w", version, err)
	}
	return nil
}

// sqliteApplied lists the versions recorded in schema_migrations (none
// before the first migration).
func sqliteApplied(ctx context.Context, tx *sql.Tx) ([]int, error) {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&n); err != nil || n == 0 {
		return nil, err
	}
	return sqliteColumn[int](ctx, tx, `SELECT version FROM schema_migrations`)
}

// sqliteDownTx is a migration transaction as storekit.Down uses it.
type sqliteDownTx struct{ tx *sql.Tx }

func (t sqliteDownTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, query, args...)
	return err
}

func (t sqliteDownTx) Strings(ctx context.Context, query string) ([]string, error) {
	return sqliteColumn[string](ctx, t.tx, query)
}

// sqliteColumn reads the one column of query's rows.
func sqliteColumn[T any](ctx context.Context, tx *sql.Tx, query string) ([]T, error) {
	rows, err := tx.QueryContext(ctx, query)
	return collectRows(rows, err, func(rows *sql.Rows, v *T) error { return rows.Scan(v) })
}

// collectRows reads each of rows into a T with scan and closes rows; err
// is the query's, returned as is.
func collectRows[T any](rows *sql.Rows, err error, scan func(rows *sql.Rows, v *T) error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// sqliteTables are the tables and views of Herald's schema (this
// release's: the advice is given for it).
const sqliteTables = "DROP VIEW outbox_record; DROP TABLE outbox; DROP TABLE outbox_retry; DROP TABLE outbox_partition; " +
	"DROP TABLE outbox_batch; DROP TABLE outbox_replay; DROP TABLE outbox_handler; DROP TABLE outbox_reader; DROP TABLE schema_migrations;"

// irreversibleAdvice is what to do when the schema cannot be taken back
// to version to from cur (docs/runbooks/rollback-schema.md says the same).
func (s *Store) irreversibleAdvice(to, cur int) string {
	backup := strings.TrimSuffix(s.path, ".db") + "-v" + fmt.Sprint(cur) + "-" + time.Now().UTC().Format("20060102") + ".db"
	return storekit.Advice(to, fmt.Sprintf(`sqlite3 %s ".backup %s"
     sqlite3 %s "%s"`, s.path, backup, s.path, sqliteTables), backup+"; delete it once nobody needs them")
}
