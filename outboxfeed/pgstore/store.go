package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the PostgreSQL outbox store (schema herald). All timestamps
// come from the database clock.
//
// A Store consumes the outbox for one handler (docs/handlers.md): Open
// returns the built-in handler realtime's, and ForHandler another's over
// the same pool.
type Store struct {
	*shared
	handler string
}

// shared is what the Stores of every handler of one database share.
type shared struct {
	pool        *pgxpool.Pool
	cfg         Config
	log         *slog.Logger
	wakeup      storekit.WakeHub
	archiveWait archiveWait // the outboxfeed.Pruner's wait for herald.outbox's lock
	alone       sync.Map    // aloneKey: the holders whose last step found no partition free (aloneAt)
}

var _ outboxfeed.Store = (*Store)(nil)

// Open connects a pool to cfg.URL (postgres:// or
// postgresql://). The pool connects lazily; use Ping to check.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: database URL: %v", outboxfeed.ErrInvalidConfig, err)
	}
	pc.MaxConns = cfg.MaxConns
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "herald"
	}
	// Herald's queries are short index probes; JIT compilation, triggered
	// by the claim's pessimistic cost estimate, would cost far more than it
	// saves. A jit setting in the URL wins.
	if pc.ConnConfig.RuntimeParams["jit"] == "" {
		pc.ConnConfig.RuntimeParams["jit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: open postgres pool: %w", err)
	}
	return &Store{shared: &shared{pool: pool, cfg: cfg, log: cfg.Logger}, handler: outboxfeed.RealtimeHandler}, nil
}

// Pool is the connection pool, for producers' transactions, admin commands
// and tests.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool. Listeners started by Wakeups end with their ctx.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Ping reports whether PostgreSQL answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("outboxfeed: ping postgres: %w", err)
	}
	return nil
}

// Migrate applies pending migrations in one transaction under an advisory
// lock, then installs or drops the notify trigger per the config. It then
// refuses, with ErrRestored, positions copied from another cluster.
func (s *Store) Migrate(ctx context.Context) error {
	return s.migrateTo(ctx, len(pgMigrations))
}

// migrateTo applies the first n migrations (tests build older schemas
// with it).
func (s *Store) migrateTo(ctx context.Context, n int) error {
	if pgMigrationsErr != nil {
		return fmt.Errorf("outboxfeed: migrate postgres: %w", pgMigrationsErr)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgMigrateLockKey); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS herald`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS herald.schema_migrations (
			version    int         PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		applied := map[int]bool{}
		rows, err := tx.Query(ctx, `SELECT version FROM herald.schema_migrations`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				return err
			}
			applied[v] = true
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, m := range pgMigrations[:n] {
			if applied[m.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO herald.schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
				return err
			}
			s.log.Info("outbox migration applied", "version", m.Version, "name", m.Name)
		}
		var has bool
		if err := tx.QueryRow(ctx, pgHasNotifyTrigger).Scan(&has); err != nil {
			return err
		}
		switch {
		case !s.cfg.DisableNotifyTrigger && !has && (applied[pgWhenTriggerVersion] || n >= pgWhenTriggerVersion):
			_, err = tx.Exec(ctx, pgCreateNotifyTrigger)
		case !s.cfg.DisableNotifyTrigger && !has:
			_, err = tx.Exec(ctx, pgCreateNotifyTriggerBefore14)
		case s.cfg.DisableNotifyTrigger && has:
			_, err = tx.Exec(ctx, pgDropNotifyTrigger)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("outboxfeed: migrate postgres: %w", err)
	}
	if n >= 3 { // positions are snapshots since migration 3
		if err := checkPositions(ctx, s.pool); err != nil {
			if errors.Is(err, ErrRestored) {
				return err
			}
			return fmt.Errorf("outboxfeed: migrate postgres: %w", err)
		}
	}
	return nil
}

// Notify tells this process's Workers that records were staged: a
// producer in this process that stages with stage.Stage on the pool calls
// it after its commit, so they need not wait for their poll. With the
// notify trigger installed (the default) it is not needed: the trigger
// wakes the Workers of every process.
func (s *Store) Notify() {
	if s.cfg.DisableNotifyTrigger {
		s.wakeup.Broadcast()
	}
}

const pgRecordColumns = `id::text, seq, tenant_id, channel, type, schema_version, payload, freshness,
	occurred_at, kind, state, attempt, next_attempt_at, lease_owner, lease_expires_at, coalesce(fence, 0),
	last_error, dispatched_at, dead_lettered_at`

// internedText scans a text column, reusing the string of an equal value
// scanned before into any target sharing its table.
type internedText struct {
	s     string
	valid bool
	table map[string]string
	limit int // the table's bound (0: maxInterned)
}

// maxInterned bounds an intern table (a claim's distinct tenants, types,
// kinds, states, owners and errors).
const maxInterned = 256

// ScanBytes implements pgtype.BytesScanner; v is the driver's memory.
func (t *internedText) ScanBytes(v []byte) error {
	if v == nil {
		t.s, t.valid = "", false
		return nil
	}
	t.valid = true
	if s, ok := t.table[string(v)]; ok {
		t.s = s
		return nil
	}
	t.s = string(v)
	if len(t.table) < cmp.Or(t.limit, maxInterned) {
		t.table[t.s] = t.s
	}
	return nil
}

// Get loads one record as the Store's handler has it.
func (s *Store) Get(ctx context.Context, id string) (outboxfeed.Record, error) {
	return s.get(ctx, id, `SELECT `+pgRecordColumns+` FROM herald.outbox_records WHERE id = $1::uuid AND handler = $2
	ORDER BY qseq DESC NULLS LAST LIMIT 1`, s.handler)
}

// get loads one record with q, a query of its id ($1) and args.
func (s *Store) get(ctx context.Context, id, q string, args ...any) (outboxfeed.Record, error) {
	if !storekit.ValidUUID(id) {
		return outboxfeed.Record{}, fmt.Errorf("%w: %q is not a uuid", outboxfeed.ErrNotFound, id)
	}
	rows, err := s.pool.Query(ctx, q, append([]any{id}, args...)...)
	if err != nil {
		return outboxfeed.Record{}, fmt.Errorf("outboxfeed: get: %w", err)
	}
	defer rows.Close()
	return storekit.OneRecord(id, rows, scanPGRecord)
}

// Stats counts the backlog: the records each partition's position does
// not cover yet (an index range per partition) and the retry queue.
// OldestPending is the oldest occurred_at among the first pgStatsHead
// records of each partition's line and of the retry queue.
func (s *Store) Stats(ctx context.Context) (outboxfeed.Stats, error) {
	var st outboxfeed.Stats
	var oldest *time.Time
	err := s.pool.QueryRow(ctx, pgStats, pgStatsHead, s.handler).Scan(&st.Pending, &st.DeadLetter, &oldest, &st.Now)
	if err != nil {
		return outboxfeed.Stats{}, fmt.Errorf("outboxfeed: stats: %w", err)
	}
	if oldest != nil {
		st.OldestPending = *oldest
	}
	return st, nil
}

// ArmsWakeups implements outboxfeed.WakeArmer: the notify trigger wakes
// the Worker while it is armed.
func (s *Store) ArmsWakeups() bool { return !s.cfg.DisableNotifyTrigger }

// pgStats: see Stats. A partition's line is its records not visible in
// lo: those of transactions at or past its xmax, read as an index range,
// and those of its in-progress list, looked up by xid; of these, the open
// range's position covers the ones visible in hi up to pos_seq. The
// in-progress list is a column of p, an array per partition: an array
// subquery inside the lateral scans became one InitPlan that PostgreSQL
// evaluated once for all partitions, and a lateral join on
// pg_snapshot_xip is estimated at 50 transactions, which lifts the plan's
// cost past jit_above_cost (tens of milliseconds of compiling).
//
// A record in the retry queue counts there, not in the line: the line is
// counted from the index (no probe per record) and the records of the
// handler's queue rows still in it are taken off (a queue row names its
// record's row by (rec_part, xid, seq); rec_part is the record's
// partition, which a repartition leaves as it is). The oldest pending
// reads only the first pgStatsHead records of each line, in claim order
// (xid, seq), and of the queue. Archived records are no longer in
// herald.outbox: they count only while queued.
const pgStatsHead = 1000

const pgStats = `
WITH p AS MATERIALIZED (
	SELECT p.part, p.lo, p.hi, p.pos_seq, pg_snapshot_xmax(p.lo) AS xmax, ARRAY(SELECT pg_snapshot_xip(p.lo)) AS xip
	FROM herald.outbox_partition p WHERE p.handler = $2
)
SELECT
	(SELECT coalesce(sum(c.n), 0)::bigint FROM p CROSS JOIN LATERAL (
		SELECT count(*) AS n FROM (
			SELECT o.xid, o.seq FROM herald.outbox o WHERE o.part = p.part AND (o.xid, o.seq) >= (p.xmax, 0)
			UNION ALL
			SELECT o.xid, o.seq FROM herald.outbox o WHERE o.part = p.part AND o.xid = ANY (p.xip)
		) o WHERE p.hi IS NULL OR NOT pg_visible_in_snapshot(o.xid, p.hi) OR o.seq > p.pos_seq
	) c)
	- (SELECT count(*) FROM p JOIN herald.outbox o ON o.part = p.part
		WHERE (o.part, o.xid, o.seq) IN (SELECT q.rec_part, q.xid, q.seq FROM herald.outbox_retry q WHERE q.handler = $2)
			AND NOT pg_visible_in_snapshot(o.xid, p.lo)
			AND (p.hi IS NULL OR NOT pg_visible_in_snapshot(o.xid, p.hi) OR o.seq > p.pos_seq))
	+ (SELECT count(*) FROM herald.outbox_retry WHERE state = 'pending' AND handler = $2),
	(SELECT count(*) FROM herald.outbox_retry WHERE dead_lettered_at IS NOT NULL AND handler = $2),
	(SELECT min(t) FROM (
		SELECT h.t FROM p CROSS JOIN LATERAL (
			SELECT o.occurred_at AS t FROM (
				(SELECT * FROM (SELECT o.occurred_at, o.xid, o.seq FROM herald.outbox o WHERE o.part = p.part AND o.xid = ANY (p.xip)
					AND (p.hi IS NULL OR NOT pg_visible_in_snapshot(o.xid, p.hi) OR o.seq > p.pos_seq)
					AND NOT EXISTS (SELECT 1 FROM herald.outbox_retry q WHERE q.seq = o.seq AND q.handler = $2)
					OFFSET 0) o
				ORDER BY o.xid, o.seq LIMIT $1)
				UNION ALL
				(SELECT o.occurred_at, o.xid, o.seq FROM herald.outbox o WHERE o.part = p.part AND (o.xid, o.seq) >= (p.xmax, 0)
					AND (p.hi IS NULL OR NOT pg_visible_in_snapshot(o.xid, p.hi) OR o.seq > p.pos_seq)
					AND NOT EXISTS (SELECT 1 FROM herald.outbox_retry q WHERE q.seq = o.seq AND q.handler = $2)
				ORDER BY o.xid, o.seq LIMIT $1)
			) o ORDER BY o.xid, o.seq LIMIT $1) h
		UNION ALL
		(SELECT occurred_at FROM herald.outbox_retry WHERE state = 'pending' AND handler = $2 ORDER BY qseq LIMIT $1)) h),
	now()`

func scanPGRecord(rows pgx.Rows) (outboxfeed.Record, error) {
	var r outboxfeed.Record
	var c storekit.StateColumns
	err := rows.Scan(&r.ID, &r.Seq, &r.TenantID, &r.Channel, &r.Type, &r.SchemaVersion,
		(*[]byte)(&r.Payload), (*[]byte)(&r.Freshness), &r.OccurredAt, &r.Kind,
		&c.State, &c.Attempt, &c.NextAttemptAt, &c.LeaseOwner, &c.LeaseExpiresAt, &c.Fence,
		&c.LastError, &c.DispatchedAt, &c.DeadLetteredAt)
	if err != nil {
		return outboxfeed.Record{}, err
	}
	r.Attempt, r.Fence = c.Attempt, c.Fence
	r.State, err = c.Decode()
	return r, err
}
