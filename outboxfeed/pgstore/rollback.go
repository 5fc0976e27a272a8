package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"

	"github.com/jackc/pgx/v5"
)

// SchemaVersion is the version of the schema in the database: the
// number of migrations applied (0 before the first).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		applied, err := pgApplied(ctx, tx)
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

// MigrateTo takes the schema to version: up as Migrate does when the
// database is older, back when it is newer. Going back reverses the steps
// from the newest on, in one transaction under the migration lock, each
// with its down step (migration/NNN_name.down.sql), which moves what is
// in flight so that no record is lost or repeated. It refuses, wrapping
// outboxfeed.ErrRollbackRefused, when a step on the way has no down step
// (the message says how to run the older release instead) or its check
// (NNN_name.downcheck.sql) names a reason not to now. Stop every Worker
// of this release first.
func (s *Store) MigrateTo(ctx context.Context, version int) error {
	if version < 0 || version > len(pgMigrations) {
		return fmt.Errorf("%w: schema version %d: this release knows 1 to %d", outboxfeed.ErrInvalidConfig, version, len(pgMigrations))
	}
	cur, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if version >= cur {
		return s.migrateTo(ctx, version)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgMigrateLockKey); err != nil {
			return err
		}
		applied, err := pgApplied(ctx, tx)
		if err != nil {
			return err
		}
		steps, err := storekit.DownSteps(pgMigrations, applied, version)
		if errors.Is(err, storekit.ErrIrreversible) {
			return fmt.Errorf("%w: %v.\n%s", outboxfeed.ErrRollbackRefused, err, pgIrreversibleAdvice(version, len(applied)))
		}
		if err != nil {
			return fmt.Errorf("%w: %v", outboxfeed.ErrRollbackRefused, err)
		}
		for _, m := range steps {
			if m.DownCheck != "" {
				reasons, err := pgDownReasons(ctx, tx, m.DownCheck)
				if err != nil {
					return fmt.Errorf("migration %d (%s): down check: %w", m.Version, m.Name, err)
				}
				if len(reasons) > 0 {
					return fmt.Errorf("%w: migration %d (%s) cannot be reversed now:\n  %s", outboxfeed.ErrRollbackRefused,
						m.Version, m.Name, strings.Join(reasons, "\n  "))
				}
			}
			if _, err := tx.Exec(ctx, m.Down); err != nil {
				return fmt.Errorf("migration %d (%s): down: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM herald.schema_migrations WHERE version = $1`, m.Version); err != nil {
				return err
			}
			s.log.Info("outbox migration reversed", "version", m.Version, "name", m.Name)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, outboxfeed.ErrRollbackRefused) || errors.Is(err, outboxfeed.ErrInvalidConfig) {
			return err
		}
		return fmt.Errorf("outboxfeed: migrate postgres back to %d: %w", version, err)
	}
	return nil
}

// pgApplied lists the versions recorded in herald.schema_migrations
// (none before the first migration).
func pgApplied(ctx context.Context, tx pgx.Tx) ([]int, error) {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('herald.schema_migrations') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT version FROM herald.schema_migrations`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// pgDownReasons runs a down check: each row it returns is a reason.
func pgDownReasons(ctx context.Context, tx pgx.Tx, check string) ([]string, error) {
	rows, err := tx.Query(ctx, check)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// pgIrreversibleAdvice is what to do when the schema cannot be taken back
// to version to from cur (docs/runbooks/rollback-schema.md says the same).
func pgIrreversibleAdvice(to, cur int) string {
	return fmt.Sprintf(`To run a release whose schema is version %d, drain the outbox and let that release create its schema anew (docs/runbooks/rollback-schema.md):
  1. stop the producers' staging, keep the Workers of this release running, and wait until
     herald outbox stats says "oldest waiting record: none";
  2. stop every Worker (herald feed, and herald serve without --feed=false);
  3. psql "$HERALD_DATABASE_URL" -c 'ALTER SCHEMA herald RENAME TO herald_v%d'   (the URL of --database-url)
  4. with the older release: herald migrate, then start its Workers, then the producers.
Dead letters and dispatched records stay in schema herald_v%d; drop it once nobody needs them.`, to, cur, cur)
}
