package sqlitestore

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

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Store is the embedded outbox store: one file in WAL mode, written
// through a single connection (every transaction is BEGIN IMMEDIATE, so
// writers queue instead of failing on a lock upgrade; other processes on the
// same file wait up to Config.BusyTimeout). Timestamps come from this
// process's clock and are stored as integer microseconds since the Unix
// epoch.
//
// It has one partition, number 0 (AnyPartition claims it too): the single
// writer makes the order of insertion the order of visibility, so one
// position per partition is exact. The comment on sqliteMigrations gives the
// layout and how a record's state is derived.
//
// A Store consumes the outbox for one handler (docs/handlers.md): Open
// returns the built-in handler realtime's, and ForHandler another's over
// the same connection.
type Store struct {
	*shared
	handler string
}

// shared is what the Stores of every handler of one database share.
type shared struct {
	db     *sql.DB
	path   string
	log    *slog.Logger
	wakeup storekit.WakeHub
}

var _ outboxfeed.Store = (*Store)(nil)

// Open opens (creating if needed) the SQLite file cfg.Path
// names: a path, sqlite://path or file:path. The directory is created.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	path, query, err := sqlitePath(cfg.Path)
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
	s := &Store{shared: &shared{db: db, path: path, log: cfg.Logger}, handler: outboxfeed.RealtimeHandler}
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
				return "", nil, fmt.Errorf("%w: database URL %q: %v", outboxfeed.ErrInvalidConfig, raw, err)
			}
			rest = rest[:i]
		}
		raw = rest
	case strings.HasPrefix(raw, "sqlite://"):
		raw = strings.TrimPrefix(raw, "sqlite://")
	}
	if raw == "" || raw == ":memory:" || strings.ContainsAny(raw, "?#") {
		return "", nil, fmt.Errorf("%w: database URL %q: want postgres://…, a SQLite file path, sqlite://path or file:path", outboxfeed.ErrInvalidConfig, raw)
	}
	return raw, q, nil
}

// DB is the database handle (one connection), for producers' transactions,
// admin commands and tests. A transaction begun on it holds the write lock
// until it ends.
func (s *Store) DB() *sql.DB { return s.db }

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Ping reports whether the database file answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("outboxfeed: ping sqlite: %w", err)
	}
	return nil
}

// Migrate applies pending migrations in one transaction.
func (s *Store) Migrate(ctx context.Context) error {
	return s.migrate(ctx, len(sqliteMigrations))
}

// migrate applies the pending migrations up to version upTo (tests build
// databases of earlier versions with it).
func (s *shared) migrate(ctx context.Context, upTo int) error {
	if sqliteMigrationsErr != nil {
		return fmt.Errorf("outboxfeed: migrate sqlite: %w", sqliteMigrationsErr)
	}
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
			if applied[m.Version] || m.Version > upTo {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.Version, m.Name, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, time.Now().UnixMicro()); err != nil {
				return err
			}
			s.log.Info("outbox migration applied", "version", m.Version, "name", m.Name)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("outboxfeed: migrate sqlite: %w", err)
	}
	return nil
}

// inTx runs fn in a BEGIN IMMEDIATE transaction.
func (s *shared) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
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

// Notify tells this process's Workers that records were staged: a
// producer in this process that stages with stage.StageSQL on DB() calls
// it after its commit, so they need not wait for their poll (records
// staged by other processes are found by polling).
func (s *Store) Notify() { s.wakeup.Broadcast() }

// Wakeups is signalled by Notify of this store (and once at the start);
// records staged by other processes are found by polling.
func (s *Store) Wakeups(ctx context.Context) <-chan struct{} {
	return s.wakeup.Subscribe(ctx)
}

// sqliteRecordColumns are the columns of the outbox_record view (a
// record and its derived lifecycle), in scanSQLiteRecord's order.
const sqliteRecordColumns = `id, seq, tenant_id, channel, type, schema_version, payload, freshness,
	occurred_at, kind, state, attempt, next_attempt_at, lease_owner, lease_expires_at, fence,
	last_error, dispatched_at, dead_lettered_at`

// Get loads one record.
func (s *Store) Get(ctx context.Context, id string) (outboxfeed.Record, error) {
	return s.get(ctx, id, `SELECT `+sqliteRecordColumns+` FROM outbox_record WHERE id = ?1 AND handler = ?2`, s.handler)
}

// get loads one record with q, a query of its canonical id (?1) and args.
func (s *Store) get(ctx context.Context, id, q string, args ...any) (outboxfeed.Record, error) {
	cid, err := storekit.CanonicalID(id)
	if err != nil || id == "" {
		return outboxfeed.Record{}, fmt.Errorf("%w: %q is not a uuid", outboxfeed.ErrNotFound, id)
	}
	rows, err := s.db.QueryContext(ctx, q, append([]any{cid}, args...)...)
	if err != nil {
		return outboxfeed.Record{}, fmt.Errorf("outboxfeed: get: %w", err)
	}
	defer rows.Close()
	return storekit.OneRecord(id, rows, scanSQLiteRecord)
}

// sqliteUnqueued is the condition "record o has no row in the retry
// queue of the handler named by the SQL expression h" (an index probe).
func sqliteUnqueued(h string) string {
	return `NOT EXISTS (SELECT 1 FROM outbox_retry q WHERE q.handler = ` + h + ` AND q.rec_seq = o.seq)`
}

// sqliteNever stands for "no such record" in min() over times.
const sqliteNever = int64(9223372036854775807)

// sqliteStats counts the records past the position (a rowid range, less
// the few the queue holds: migrated ones) and the pending queue rows
// (partial index), and finds the
// oldest of the first record past the position and the pending queue rows,
// of handler ?2.
var sqliteStats = `SELECT
	(SELECT count(*) FROM outbox o WHERE o.seq > p.pos)
	- (SELECT count(*) FROM outbox_retry q WHERE q.handler = p.handler AND q.rec_seq > p.pos
		AND EXISTS (SELECT 1 FROM outbox o WHERE o.seq = q.rec_seq))
	+ (SELECT count(*) FROM outbox_retry INDEXED BY outbox_retry_pending_idx WHERE handler = p.handler AND state = 'pending'),
	(SELECT count(*) FROM outbox_retry INDEXED BY outbox_retry_dead_letter_idx WHERE handler = p.handler AND state = 'dead_letter'),
	min(coalesce((SELECT o.occurred_at FROM outbox o WHERE o.seq > p.pos AND ` + sqliteUnqueued("p.handler") + ` ORDER BY o.seq LIMIT 1), ?1),
	    coalesce((SELECT min(occurred_at) FROM outbox_retry WHERE handler = p.handler AND state = 'pending'), ?1))
FROM outbox_partition p WHERE p.handler = ?2 AND p.part = 0`

// Stats counts the backlog: the records past the partition's position and
// the pending rows of the retry queue.
func (s *Store) Stats(ctx context.Context) (outboxfeed.Stats, error) {
	var st outboxfeed.Stats
	var oldest int64
	err := s.db.QueryRowContext(ctx, sqliteStats, sqliteNever, s.handler).Scan(&st.Pending, &st.DeadLetter, &oldest)
	if err != nil {
		return outboxfeed.Stats{}, fmt.Errorf("outboxfeed: stats: %w", err)
	}
	if oldest != sqliteNever {
		st.OldestPending = micros(oldest)
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

func scanSQLiteRecord(rows *sql.Rows) (outboxfeed.Record, error) {
	var r outboxfeed.Record
	var c storekit.StateColumns
	var payload, freshness string
	var occurred, next int64
	var owner, lastErr sql.NullString
	var expires, dispatched, dead sql.NullInt64
	err := rows.Scan(&r.ID, &r.Seq, &r.TenantID, &r.Channel, &r.Type, &r.SchemaVersion,
		&payload, &freshness, &occurred, &r.Kind,
		&c.State, &c.Attempt, &next, &owner, &expires, &c.Fence,
		&lastErr, &dispatched, &dead)
	if err != nil {
		return outboxfeed.Record{}, err
	}
	r.Payload, r.Freshness = json.RawMessage(payload), json.RawMessage(freshness)
	r.OccurredAt = micros(occurred)
	c.NextAttemptAt = micros(next)
	c.LeaseOwner, c.LastError = strPtr(owner), strPtr(lastErr)
	c.LeaseExpiresAt, c.DispatchedAt, c.DeadLetteredAt = microsPtr(expires), microsPtr(dispatched), microsPtr(dead)
	r.Attempt, r.Fence = c.Attempt, c.Fence
	if r.State, err = c.Decode(); err != nil {
		return outboxfeed.Record{}, err
	}
	return r, nil
}
