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
	var v int
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		applied, err := sqliteApplied(ctx, tx)
		if err != nil {
			return err
		}
		v, err = storekit.Current(applied)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outboxfeed: schema version: %w", err)
	}
	return v, nil
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
	if version < 0 || version > len(sqliteMigrations) {
		return fmt.Errorf("%w: schema version %d: this release knows 1 to %d", outboxfeed.ErrInvalidConfig, version, len(sqliteMigrations))
	}
	cur, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if version >= cur {
		return s.migrate(ctx, version)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		applied, err := sqliteApplied(ctx, tx)
		if err != nil {
			return err
		}
		steps, err := storekit.DownSteps(sqliteMigrations, applied, version)
		if errors.Is(err, storekit.ErrIrreversible) {
			return fmt.Errorf("%w: %v.\n%s", outboxfeed.ErrRollbackRefused, err, s.irreversibleAdvice(version, len(applied)))
		}
		if err != nil {
			return fmt.Errorf("%w: %v", outboxfeed.ErrRollbackRefused, err)
		}
		for _, m := range steps {
			if m.DownCheck != "" {
				reasons, err := sqliteDownReasons(ctx, tx, m.DownCheck)
				if err != nil {
					return fmt.Errorf("migration %d (%s): down check: %w", m.Version, m.Name, err)
				}
				if len(reasons) > 0 {
					return fmt.Errorf("%w: migration %d (%s) cannot be reversed now:\n  %s", outboxfeed.ErrRollbackRefused,
						m.Version, m.Name, strings.Join(reasons, "\n  "))
				}
			}
			if _, err := tx.ExecContext(ctx, m.Down); err != nil {
				return fmt.Errorf("migration %d (%s): down: %w", m.Version, m.Name, err)
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = ?`, m.Version); err != nil {
				return err
			}
			s.log.Info("outbox migration reversed", "version", m.Version, "name", m.Name)
		}
		return nil
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

// sqliteDownReasons runs a down check: each row it returns is a reason.
func sqliteDownReasons(ctx context.Context, tx *sql.Tx, check string) ([]string, error) {
	return sqliteColumn[string](ctx, tx, check)
}

// sqliteColumn reads the one column of query's rows.
func sqliteColumn[T any](ctx context.Context, tx *sql.Tx, query string) ([]T, error) {
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
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
	return fmt.Sprintf(`To run a release whose schema is version %d, drain the outbox and let that release create its schema anew (docs/runbooks/rollback-schema.md):
  1. stop the producers' staging, keep the Workers of this release running, and wait until
     herald outbox stats says "oldest waiting record: none";
  2. stop every Worker (herald feed, and herald serve without --feed=false);
  3. sqlite3 %s ".backup %s"
     sqlite3 %s "%s"
  4. with the older release: herald migrate, then start its Workers, then the producers.
Dead letters and dispatched records stay in %s; delete it once nobody needs them.`, to, s.path, backup, s.path, sqliteTables, backup)
}
