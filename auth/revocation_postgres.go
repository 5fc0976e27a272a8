package auth

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresRevocations is a RevocationStore in the PostgreSQL table
// herald.revocation. Call Migrate once (any node, any number of times)
// before use. Time comparisons use the database clock.
type PostgresRevocations struct {
	pool *pgxpool.Pool
}

// NewPostgresRevocations returns a store on pool; the caller owns pool.
func NewPostgresRevocations(pool *pgxpool.Pool) *PostgresRevocations {
	return &PostgresRevocations{pool: pool}
}

// revocationMigrateLock is the advisory lock key serializing Migrate.
const revocationMigrateLock int64 = 0x6865_7261_6c64_7276 // "heraldrv"

const pgRevocationSchema = `
CREATE SCHEMA IF NOT EXISTS herald;
CREATE TABLE IF NOT EXISTS herald.revocation (
	kind       text        NOT NULL CHECK (kind IN ('sid', 'jti')),
	id         text        NOT NULL CHECK (length(id) BETWEEN 1 AND 256),
	expires_at timestamptz NOT NULL,
	reason     text        NOT NULL DEFAULT '' CHECK (length(reason) <= 512),
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (kind, id)
);
CREATE INDEX IF NOT EXISTS revocation_expires_at_idx ON herald.revocation (expires_at);
COMMENT ON TABLE herald.revocation IS 'Revoked Herald sessions (sid) and tokens (jti); rows past expires_at are pruned.';
`

// Migrate creates schema herald and table herald.revocation if missing.
// It is idempotent and safe to run concurrently from several nodes.
func (s *PostgresRevocations) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", revocationMigrateLock); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, pgRevocationSchema)
		return err
	})
	if err != nil {
		return fmt.Errorf("auth: migrate revocations: %w", err)
	}
	return nil
}

// Revoke records r, pruning expired rows in the same round trip.
func (s *PostgresRevocations) Revoke(ctx context.Context, r Revocation) error {
	kind, id, err := r.key()
	if err != nil {
		return wrapRevoke(err)
	}
	b := &pgx.Batch{}
	b.Queue("DELETE FROM herald.revocation WHERE expires_at <= now()")
	b.Queue(`INSERT INTO herald.revocation (kind, id, expires_at, reason) VALUES ($1, $2, $3, $4)
		ON CONFLICT (kind, id) DO UPDATE
		SET expires_at = GREATEST(herald.revocation.expires_at, EXCLUDED.expires_at),
		    reason = EXCLUDED.reason`, kind, id, r.Until, r.Reason)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return wrapRevoke(err)
	}
	return nil
}

// IsRevoked reports whether c's sid or jti is revoked now.
func (s *PostgresRevocations) IsRevoked(ctx context.Context, c *Claims) (bool, error) {
	return lookUpRevoked(c, func(sid, jti string) (revoked bool, err error) {
		err = s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM herald.revocation
		WHERE expires_at > now() AND ((kind = 'sid' AND id = $1) OR (kind = 'jti' AND id = $2)))`,
			sid, jti).Scan(&revoked)
		return revoked, err
	})
}

// List returns the live revocations by created_at then id.
func (s *PostgresRevocations) List(ctx context.Context) ([]Revocation, error) {
	rows, err := s.pool.Query(ctx, `SELECT kind, id, expires_at, reason, created_at
		FROM herald.revocation WHERE expires_at > now()
		ORDER BY created_at, kind DESC, id`)
	if err != nil {
		return nil, fmt.Errorf("auth: list revocations: %w", err)
	}
	var out []Revocation
	var kind, id, reason string
	var until, created time.Time
	_, err = pgx.ForEachRow(rows, []any{&kind, &id, &until, &reason, &created}, func() error {
		out = append(out, revocationOf(kind, id, until, reason, created))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("auth: list revocations: %w", err)
	}
	return out, nil
}

// Snapshot returns the live revocations in one query.
func (s *PostgresRevocations) Snapshot(ctx context.Context) (*RevocationSet, error) {
	rows, err := s.pool.Query(ctx, "SELECT kind, id, expires_at FROM herald.revocation WHERE expires_at > now()")
	if err != nil {
		return nil, fmt.Errorf("auth: revocation snapshot: %w", err)
	}
	set := newRevocationSet()
	var kind, id string
	var until time.Time
	_, err = pgx.ForEachRow(rows, []any{&kind, &id, &until}, func() error {
		set.add(kind, id, until)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("auth: revocation snapshot: %w", err)
	}
	return set, nil
}

// Prune deletes revocations whose Until has passed.
func (s *PostgresRevocations) Prune(ctx context.Context) (int, error) {
	tag, err := s.pool.Exec(ctx, "DELETE FROM herald.revocation WHERE expires_at <= now()")
	if err != nil {
		return 0, fmt.Errorf("auth: prune revocations: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
