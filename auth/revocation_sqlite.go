package auth

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// SQLiteRevocations is a RevocationStore in the SQLite table revocation,
// for the embedded single-node setup. Times are stored as Unix
// milliseconds and compared with the process clock.
type SQLiteRevocations struct {
	db    *sql.DB
	owned bool
	now   func() time.Time
}

// NewSQLiteRevocations returns a store on db (driver "sqlite",
// modernc.org/sqlite); the caller owns db and calls Migrate.
func NewSQLiteRevocations(db *sql.DB) *SQLiteRevocations {
	return &SQLiteRevocations{db: db, now: time.Now}
}

// OpenSQLiteRevocations opens (creating if needed) the database file at
// path with WAL and a 5 s busy timeout, runs Migrate, and returns a store
// that owns the database: Close closes it.
func OpenSQLiteRevocations(ctx context.Context, path string) (*SQLiteRevocations, error) {
	if path == "" {
		return nil, fmt.Errorf("auth: open sqlite revocations: path is empty")
	}
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() +
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("auth: open sqlite revocations: %w", err)
	}
	s := &SQLiteRevocations{db: db, owned: true, now: time.Now}
	if err := s.Migrate(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database if OpenSQLiteRevocations opened it; otherwise
// it does nothing.
func (s *SQLiteRevocations) Close() error {
	if !s.owned {
		return nil
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("auth: close sqlite revocations: %w", err)
	}
	return nil
}

const sqliteRevocationSchema = `
CREATE TABLE IF NOT EXISTS revocation (
	kind       TEXT    NOT NULL CHECK (kind IN ('sid', 'jti')),
	id         TEXT    NOT NULL CHECK (length(id) BETWEEN 1 AND 256),
	expires_at INTEGER NOT NULL,
	reason     TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	PRIMARY KEY (kind, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS revocation_expires_at_idx ON revocation (expires_at);
`

// Migrate creates table revocation if missing; it is idempotent.
func (s *SQLiteRevocations) Migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, sqliteRevocationSchema); err != nil {
		return fmt.Errorf("auth: migrate sqlite revocations: %w", err)
	}
	return nil
}

// Revoke records r, pruning expired rows in the same transaction.
func (s *SQLiteRevocations) Revoke(ctx context.Context, r Revocation) error {
	kind, id, err := r.key()
	if err != nil {
		return wrapRevoke(err)
	}
	now := s.now().UnixMilli()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return wrapRevoke(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "DELETE FROM revocation WHERE expires_at <= ?", now); err != nil {
		return wrapRevoke(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO revocation (kind, id, expires_at, reason, created_at)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (kind, id) DO UPDATE
		SET expires_at = max(expires_at, excluded.expires_at), reason = excluded.reason`,
		kind, id, r.Until.UnixMilli(), r.Reason, now); err != nil {
		return wrapRevoke(err)
	}
	if err := tx.Commit(); err != nil {
		return wrapRevoke(err)
	}
	return nil
}

// IsRevoked reports whether c's sid or jti is revoked now.
func (s *SQLiteRevocations) IsRevoked(ctx context.Context, c *Claims) (bool, error) {
	return lookUpRevoked(c, func(sid, jti string) (revoked bool, err error) {
		err = s.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM revocation
		WHERE expires_at > ? AND ((kind = 'sid' AND id = ?) OR (kind = 'jti' AND id = ?)))`,
			s.now().UnixMilli(), sid, jti).Scan(&revoked)
		return revoked, err
	})
}

// List returns the live revocations by created_at then id.
func (s *SQLiteRevocations) List(ctx context.Context) ([]Revocation, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT kind, id, expires_at, reason, created_at
		FROM revocation WHERE expires_at > ? ORDER BY created_at, kind DESC, id`, s.now().UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("auth: list revocations: %w", err)
	}
	defer rows.Close()
	var out []Revocation
	for rows.Next() {
		var kind, id, reason string
		var until, created int64
		if err := rows.Scan(&kind, &id, &until, &reason, &created); err != nil {
			return nil, fmt.Errorf("auth: list revocations: %w", err)
		}
		out = append(out, revocationOf(kind, id, time.UnixMilli(until), reason, time.UnixMilli(created)))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("auth: list revocations: %w", err)
	}
	return out, nil
}

// Snapshot returns the live revocations in one query.
func (s *SQLiteRevocations) Snapshot(ctx context.Context) (*RevocationSet, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT kind, id, expires_at FROM revocation WHERE expires_at > ?", s.now().UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("auth: revocation snapshot: %w", err)
	}
	defer rows.Close()
	set := newRevocationSet()
	for rows.Next() {
		var kind, id string
		var until int64
		if err := rows.Scan(&kind, &id, &until); err != nil {
			return nil, fmt.Errorf("auth: revocation snapshot: %w", err)
		}
		set.add(kind, id, time.UnixMilli(until))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("auth: revocation snapshot: %w", err)
	}
	return set, nil
}

// Prune deletes revocations whose Until has passed.
func (s *SQLiteRevocations) Prune(ctx context.Context) (int, error) {
	res, err := s.db.ExecContext(ctx, "DELETE FROM revocation WHERE expires_at <= ?", s.now().UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("auth: prune revocations: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("auth: prune revocations: %w", err)
	}
	return int(n), nil
}
