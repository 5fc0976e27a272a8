package outboxfeed

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// SQLiteStore is the embedded outbox store: one file in WAL mode, written
// through a single connection (every transaction is BEGIN IMMEDIATE, so
// writers queue instead of failing on a lock upgrade; other processes on the
// same file wait up to Config.BusyTimeout). Timestamps come from this
// process's clock and are stored as integer microseconds since the Unix
// epoch.
type SQLiteStore struct {
	db     *sql.DB
	path   string
	log    *slog.Logger
	wakeup wakeHub
}

var _ Store = (*SQLiteStore)(nil)

// OpenSQLite opens (creating if needed) the SQLite file cfg.DatabaseURL
// names: a path, sqlite://path or file:path. The directory is created.
func OpenSQLite(ctx context.Context, cfg Config) (*SQLiteStore, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	path, query, err := sqlitePath(cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("outboxfeed: create data directory: %w", err)
		}
	}
	query.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", cfg.BusyTimeout.Milliseconds()))
	query.Add("_pragma", "journal_mode(WAL)")
	query.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+query.Encode())
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: open sqlite: %w", err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	s := &SQLiteStore{db: db, path: path, log: cfg.Logger}
	if err := s.Ping(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// sqlitePath splits a SQLite location into a file path and extra DSN
// query parameters (kept from a file: URL).
func sqlitePath(raw string) (string, url.Values, error) {
	q := url.Values{}
	switch {
	case strings.HasPrefix(raw, "file:"):
		rest := strings.TrimPrefix(raw, "file:")
		if i := strings.IndexByte(rest, '?'); i >= 0 {
			var err error
			if q, err = url.ParseQuery(rest[i+1:]); err != nil {
				return "", nil, fmt.Errorf("%w: database URL %q: %v", ErrInvalidConfig, raw, err)
			}
			rest = rest[:i]
		}
		raw = rest
	case strings.HasPrefix(raw, "sqlite://"):
		raw = strings.TrimPrefix(raw, "sqlite://")
	}
	if raw == "" || raw == ":memory:" || strings.ContainsAny(raw, "?#") {
		return "", nil, fmt.Errorf("%w: database URL %q: want postgres://…, a SQLite file path, sqlite://path or file:path", ErrInvalidConfig, raw)
	}
	return raw, q, nil
}

// DB is the database handle (one connection), for producers' transactions,
// admin commands and tests. A transaction begun on it holds the write lock
// until it ends.
func (s *SQLiteStore) DB() *sql.DB { return s.db }

// Path is the database file.
func (s *SQLiteStore) Path() string { return s.path }

// Close closes the database.
func (s *SQLiteStore) Close() error { return s.db.Close() }

// Ping reports whether the database file answers.
func (s *SQLiteStore) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("outboxfeed: ping sqlite: %w", err)
	}
	return nil
}

// Migrate applies pending migrations in one transaction.
func (s *SQLiteStore) Migrate(ctx context.Context) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    INTEGER PRIMARY KEY,
			name       TEXT    NOT NULL,
			applied_at INTEGER NOT NULL)`); err != nil {
			return err
		}
		applied := map[int]bool{}
		rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return err
			}
			applied[v] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, m := range sqliteMigrations {
			if applied[m.version] {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.version, m.name, time.Now().UnixMicro()); err != nil {
				return err
			}
			s.log.Info("outbox migration applied", "version", m.version, "name", m.name)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("outboxfeed: migrate sqlite: %w", err)
	}
	return nil
}

// inTx runs fn in a BEGIN IMMEDIATE transaction.
func (s *SQLiteStore) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// StageOne stages n in its own transaction and wakes this process's
// Workers.
func (s *SQLiteStore) StageOne(ctx context.Context, n Notification) (string, error) {
	var id string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		id, err = StageSQL(ctx, tx, n)
		return err
	})
	if err != nil {
		return "", err
	}
	s.wakeup.broadcast()
	return id, nil
}

// Wakeups is signalled by StageOne of this store (and once at the start);
// records staged by other processes are found by polling.
func (s *SQLiteStore) Wakeups(ctx context.Context) <-chan struct{} {
	return s.wakeup.subscribe(ctx)
}

const sqliteRecordColumns = `id, seq, tenant_id, channel, type, schema_version, payload, freshness,
	occurred_at, kind, state, attempt, next_attempt_at, lease_owner, lease_expires_at, fence,
	last_error, dispatched_at, dead_lettered_at`

// sqliteGiveUp dead-letters the expired leases whose failed attempt uses
// up the attempts (?3 > 0); sqliteRequeueExpired returns the other expired
// leases to pending, burning the attempt they stood for.
const (
	sqliteGiveUp = `
UPDATE outbox
SET state = 'dead_letter', attempt = attempt + 1, dead_lettered_at = ?1,
    last_error = 'gave up after ' || (attempt + 1) || ' attempts: lease of ' || lease_owner || ' expired',
    lease_owner = NULL, lease_expires_at = NULL
WHERE state = 'processing' AND lease_expires_at < ?1 AND ?2 > 0 AND attempt + 1 >= ?2
RETURNING ` + sqliteRecordColumns

	sqliteRequeueExpired = `
UPDATE outbox
SET state = 'pending', attempt = attempt + 1, lease_owner = NULL, lease_expires_at = NULL,
    last_error = 'lease of ' || lease_owner || ' expired'
WHERE state = 'processing' AND lease_expires_at < ?1`
)

// Claim returns expired claims to pending (each burning an attempt) and
// claims a batch in one BEGIN IMMEDIATE transaction.
func (s *SQLiteStore) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]Record, error) {
	res, err := s.claimCycle(ctx, claimRequest{owner: owner, limit: limit, lease: lease})
	if err != nil {
		return nil, err
	}
	return res.claimed, nil
}

// claimCycle completes req.complete, requeues expired claims and claims
// the next batch in one BEGIN IMMEDIATE transaction.
func (s *SQLiteStore) claimCycle(ctx context.Context, req claimRequest) (claimResult, error) {
	var res claimResult
	if req.limit <= 0 && len(req.complete) == 0 {
		return res, nil
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res = claimResult{}
		now := time.Now().UnixMicro()
		if len(req.complete) > 0 {
			r, err := tx.ExecContext(ctx, sqliteComplete, req.owner, leasesJSON(req.complete), now)
			if err != nil {
				return err
			}
			n, err := r.RowsAffected()
			if err != nil {
				return err
			}
			res.completed = int(n)
		}
		if req.limit <= 0 {
			return nil
		}
		var err error
		if res.exhausted, err = querySQLiteRecords(ctx, tx, sqliteGiveUp, now, req.maxAttempts); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqliteRequeueExpired, now); err != nil {
			return err
		}
		seqs, err := s.pick(ctx, tx, req, now, &res)
		if err != nil || len(seqs) == 0 {
			return err
		}
		list, err := json.Marshal(seqs)
		if err != nil {
			return err
		}
		res.claimed, err = querySQLiteRecords(ctx, tx, sqliteClaimSeqs, req.owner, string(list), now+req.lease.Microseconds())
		return err
	})
	if err != nil {
		return claimResult{}, fmt.Errorf("outboxfeed: claim: %w", err)
	}
	sortBySeq(res.claimed)
	return res, nil
}

// querySQLiteRecords runs a statement returning sqliteRecordColumns.
func querySQLiteRecords(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]Record, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanSQLiteRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// leasesJSON encodes leases as [[id, fence], …] for json_each.
func leasesJSON(leases []Lease) string {
	pairs := make([][2]any, len(leases))
	for i, l := range leases {
		pairs[i] = [2]any{l.ID, l.Fence}
	}
	b, _ := json.Marshal(pairs) // strings and integers always encode
	return string(b)
}

const sqliteLeaseMatch = `state = 'processing' AND lease_owner = ?1 AND (id, fence) IN (
	SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?2))`

const sqliteComplete = `UPDATE outbox
SET state = 'dispatched', dispatched_at = ?3, lease_owner = NULL, lease_expires_at = NULL
WHERE ` + sqliteLeaseMatch

// Complete marks held leases dispatched in one statement.
func (s *SQLiteStore) Complete(ctx context.Context, owner string, leases []Lease) (int, error) {
	if len(leases) == 0 {
		return 0, nil
	}
	res, err := s.db.ExecContext(ctx, sqliteComplete, owner, leasesJSON(leases), time.Now().UnixMicro())
	if err != nil {
		return 0, fmt.Errorf("outboxfeed: complete: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("outboxfeed: rows affected: %w", err)
	}
	return int(n), nil
}

// Retry returns a held lease to pending after delay, burning an attempt.
func (s *SQLiteStore) Retry(ctx context.Context, owner string, l Lease, delay time.Duration, lastError string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE outbox
SET state = 'pending', attempt = attempt + 1, last_error = ?4, next_attempt_at = ?5,
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = ?1 AND fence = ?2 AND lease_owner = ?3 AND state = 'processing'`,
		l.ID, l.Fence, owner, truncateError(lastError), time.Now().Add(delay).UnixMicro())
	if err != nil {
		return false, fmt.Errorf("outboxfeed: retry: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("outboxfeed: rows affected: %w", err)
	}
	return n == 1, nil
}

// DeadLetter moves a held lease to dead_letter, burning an attempt.
func (s *SQLiteStore) DeadLetter(ctx context.Context, owner string, l Lease, reason string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE outbox
SET state = 'dead_letter', attempt = attempt + 1, last_error = ?4, dead_lettered_at = ?5,
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = ?1 AND fence = ?2 AND lease_owner = ?3 AND state = 'processing'`,
		l.ID, l.Fence, owner, truncateError(reason), time.Now().UnixMicro())
	if err != nil {
		return false, fmt.Errorf("outboxfeed: dead-letter: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("outboxfeed: rows affected: %w", err)
	}
	return n == 1, nil
}

// Release gives held leases back to pending, attempt unchanged.
func (s *SQLiteStore) Release(ctx context.Context, owner string, leases []Lease) (int, error) {
	if len(leases) == 0 {
		return 0, nil
	}
	res, err := s.db.ExecContext(ctx, `UPDATE outbox
SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL
WHERE `+sqliteLeaseMatch, owner, leasesJSON(leases))
	if err != nil {
		return 0, fmt.Errorf("outboxfeed: release: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("outboxfeed: rows affected: %w", err)
	}
	return int(n), nil
}

// Get loads one record.
func (s *SQLiteStore) Get(ctx context.Context, id string) (Record, error) {
	cid, err := canonicalID(id)
	if err != nil || id == "" {
		return Record{}, fmt.Errorf("%w: %q is not a uuid", ErrNotFound, id)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+sqliteRecordColumns+` FROM outbox WHERE id = ?`, cid)
	if err != nil {
		return Record{}, fmt.Errorf("outboxfeed: get: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Record{}, fmt.Errorf("outboxfeed: get: %w", err)
		}
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	r, err := scanSQLiteRecord(rows)
	if err != nil {
		return Record{}, fmt.Errorf("outboxfeed: get: %w", err)
	}
	return r, nil
}

// Stats counts the backlog with index-backed subqueries.
func (s *SQLiteStore) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	var oldest sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT
	(SELECT count(*) FROM outbox WHERE state = 'pending') + (SELECT count(*) FROM outbox WHERE state = 'processing'),
	(SELECT count(*) FROM outbox WHERE state = 'dead_letter'),
	min(coalesce((SELECT occurred_at FROM outbox WHERE state = 'pending' ORDER BY seq LIMIT 1), 9223372036854775807),
	    coalesce((SELECT min(occurred_at) FROM outbox WHERE state = 'processing'), 9223372036854775807))`).
		Scan(&st.Pending, &st.DeadLetter, &oldest)
	if err != nil {
		return Stats{}, fmt.Errorf("outboxfeed: stats: %w", err)
	}
	if oldest.Valid && oldest.Int64 != 9223372036854775807 {
		st.OldestPending = time.UnixMicro(oldest.Int64).UTC()
	}
	st.Now = time.Now()
	return st, nil
}

func micros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func microsPtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := micros(v.Int64)
	return &t
}

func strPtr(v sql.NullString) *string {
	if !v.Valid {
		return nil
	}
	return &v.String
}

func scanSQLiteRecord(rows *sql.Rows) (Record, error) {
	var r Record
	var c stateColumns
	var payload, freshness string
	var occurred, next int64
	var owner, lastErr sql.NullString
	var expires, dispatched, dead sql.NullInt64
	err := rows.Scan(&r.ID, &r.Seq, &r.TenantID, &r.Channel, &r.Type, &r.SchemaVersion,
		&payload, &freshness, &occurred, &r.Kind,
		&c.state, &c.attempt, &next, &owner, &expires, &c.fence,
		&lastErr, &dispatched, &dead)
	if err != nil {
		return Record{}, err
	}
	r.Payload, r.Freshness = json.RawMessage(payload), json.RawMessage(freshness)
	r.OccurredAt = micros(occurred)
	c.nextAttemptAt = micros(next)
	c.leaseOwner, c.lastError = strPtr(owner), strPtr(lastErr)
	c.leaseExpiresAt, c.dispatchedAt, c.deadLetteredAt = microsPtr(expires), microsPtr(dispatched), microsPtr(dead)
	r.Attempt, r.Fence = c.attempt, c.fence
	if r.State, err = c.toState(); err != nil {
		return Record{}, err
	}
	return r, nil
}
