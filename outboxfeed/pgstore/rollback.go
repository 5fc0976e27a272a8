package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"

	"github.com/jackc/pgx/v5"
)

// SchemaVersion is the version of the schema in the database: the
// number of migrations applied (0 before the first).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	return storekit.SchemaVersion(ctx, func(ctx context.Context) (applied []int, err error) {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			applied, err = pgApplied(ctx, tx)
			return err
		})
		return applied, err
	})
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
	if pgMigrationsErr != nil {
		return fmt.Errorf("outboxfeed: migrate postgres: %w", pgMigrationsErr)
	}
	return storekit.MigrateTo(ctx, version, len(pgMigrations), s.SchemaVersion, s.migrateTo, s.migrateBack)
}

// migrateBack takes the schema back to version, below the current one.
func (s *Store) migrateBack(ctx context.Context, version int) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgMigrateLockKey); err != nil {
			return err
		}
		applied, err := pgApplied(ctx, tx)
		if err != nil {
			return err
		}
		return storekit.Down(ctx, pgDownTx{tx}, pgMigrations, applied, version,
			`DELETE FROM herald.schema_migrations WHERE version = $1`, pgIrreversibleAdvice, s.log)
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

// pgDownTx is a migration transaction as storekit.Down uses it.
type pgDownTx struct{ tx pgx.Tx }

func (t pgDownTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.Exec(ctx, query, args...)
	return err
}

func (t pgDownTx) Strings(ctx context.Context, query string) ([]string, error) {
	rows, err := t.tx.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// pgIrreversibleAdvice is what to do when the schema cannot be taken back
// to version to from cur (docs/runbooks/rollback-schema.md says the same).
func pgIrreversibleAdvice(to, cur int) string {
	return storekit.Advice(to, fmt.Sprintf(`psql "$HERALD_DATABASE_URL" -c 'ALTER SCHEMA herald RENAME TO herald_v%d'   (the URL of --database-url)`, cur),
		fmt.Sprintf("schema herald_v%d; drop it once nobody needs them", cur))
}
