package outboxfeed

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PGStore is the PostgreSQL outbox store (schema herald). All timestamps
// come from the database clock.
type PGStore struct {
	pool   *pgxpool.Pool
	cfg    Config
	log    *slog.Logger
	wakeup wakeHub
}

var _ Store = (*PGStore)(nil)

// OpenPG connects a pool to cfg.DatabaseURL (postgres:// or
// postgresql://). The pool connects lazily; use Ping to check.
func OpenPG(ctx context.Context, cfg Config) (*PGStore, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("%w: database URL: %v", ErrInvalidConfig, err)
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
	return &PGStore{pool: pool, cfg: cfg, log: cfg.Logger}, nil
}

// Pool is the connection pool, for producers' transactions, admin commands
// and tests.
func (s *PGStore) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool. Listeners started by Wakeups end with their ctx.
func (s *PGStore) Close() error {
	s.pool.Close()
	return nil
}

// Ping reports whether PostgreSQL answers.
func (s *PGStore) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("outboxfeed: ping postgres: %w", err)
	}
	return nil
}

// Migrate applies pending migrations in one transaction under an advisory
// lock, then installs or drops the notify trigger per the config.
func (s *PGStore) Migrate(ctx context.Context) error {
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
		for _, m := range pgMigrations {
			if applied[m.version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO herald.schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return err
			}
			s.log.Info("outbox migration applied", "version", m.version, "name", m.name)
		}
		var has bool
		if err := tx.QueryRow(ctx, pgHasNotifyTrigger).Scan(&has); err != nil {
			return err
		}
		switch {
		case !s.cfg.DisableNotifyTrigger && !has:
			_, err = tx.Exec(ctx, pgCreateNotifyTrigger)
		case s.cfg.DisableNotifyTrigger && has:
			_, err = tx.Exec(ctx, pgDropNotifyTrigger)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("outboxfeed: migrate postgres: %w", err)
	}
	return nil
}

// StageOne stages n in its own transaction.
func (s *PGStore) StageOne(ctx context.Context, n Notification) (string, error) {
	var id string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		id, err = Stage(ctx, tx, n)
		return err
	})
	if err != nil {
		return "", err
	}
	if s.cfg.DisableNotifyTrigger {
		s.wakeup.broadcast()
	}
	return id, nil
}

const pgRecordColumns = `id::text, seq, tenant_id, channel, type, schema_version, payload, freshness,
	occurred_at, kind, state, attempt, next_attempt_at, lease_owner, lease_expires_at, fence,
	last_error, dispatched_at, dead_lettered_at`

const pgRequeueExpired = `
UPDATE herald.outbox
SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,
    last_error = 'lease of ' || lease_owner || ' expired'
WHERE state = 'processing' AND lease_expires_at < statement_timestamp()`

// pgClaim picks due pending records in seq order, skipping channels with a
// record in processing or an earlier pending record not yet due. The two
// checks are scalar subqueries on purpose: PostgreSQL runs them as one index
// probe per candidate instead of planning an anti-join that, with stale
// statistics, compares every candidate with every blocking row.
const pgClaim = `
WITH picked AS (
	SELECT o.id FROM herald.outbox o
	WHERE o.state = 'pending' AND o.next_attempt_at <= statement_timestamp()
	  AND (SELECT true FROM herald.outbox b
		WHERE b.tenant_id = o.tenant_id AND b.channel = o.channel AND b.state = 'processing'
		LIMIT 1) IS NULL
	  AND (SELECT true FROM herald.outbox b
		WHERE b.tenant_id = o.tenant_id AND b.channel = o.channel AND b.state = 'pending'
		  AND b.attempt > 0 AND b.next_attempt_at > statement_timestamp() AND b.seq < o.seq
		LIMIT 1) IS NULL
	ORDER BY o.seq
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
UPDATE herald.outbox o
SET state = 'processing', lease_owner = $1,
    lease_expires_at = statement_timestamp() + $3::bigint * interval '1 microsecond',
    fence = o.fence + 1
FROM picked WHERE o.id = picked.id
RETURNING ` + pgRecordColumnsQualified

const pgRecordColumnsQualified = `o.id::text, o.seq, o.tenant_id, o.channel, o.type, o.schema_version,
	o.payload, o.freshness, o.occurred_at, o.kind, o.state, o.attempt, o.next_attempt_at,
	o.lease_owner, o.lease_expires_at, o.fence, o.last_error, o.dispatched_at, o.dead_lettered_at`

// Claim requeues expired claims and claims a batch, in one short
// transaction serialized with other claimers by an advisory lock.
func (s *PGStore) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]Record, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []Record
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		out = out[:0]
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, pgClaimLockKey)
		b.Queue(pgRequeueExpired)
		b.Queue(pgClaim, owner, limit, lease.Microseconds())
		br := tx.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return err
		}
		for rows.Next() {
			r, err := scanPGRecord(rows)
			if err != nil {
				rows.Close()
				br.Close()
				return err
			}
			out = append(out, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			br.Close()
			return err
		}
		return br.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: claim: %w", err)
	}
	sortBySeq(out)
	return out, nil
}

// Complete marks held leases dispatched in one statement.
func (s *PGStore) Complete(ctx context.Context, owner string, leases []Lease) (int, error) {
	if len(leases) == 0 {
		return 0, nil
	}
	ids, fences := splitLeases(leases)
	tag, err := s.pool.Exec(ctx, `
UPDATE herald.outbox o
SET state = 'dispatched', dispatched_at = now(), lease_owner = NULL, lease_expires_at = NULL
FROM unnest($2::text[], $3::bigint[]) AS c(id, fence)
WHERE o.id = c.id::uuid AND o.fence = c.fence AND o.lease_owner = $1 AND o.state = 'processing'`,
		owner, ids, fences)
	if err != nil {
		return 0, fmt.Errorf("outboxfeed: complete: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Retry returns a held lease to pending after delay, burning an attempt.
func (s *PGStore) Retry(ctx context.Context, owner string, l Lease, delay time.Duration, lastError string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `
UPDATE herald.outbox
SET state = 'pending', attempt = attempt + 1, last_error = $4,
    next_attempt_at = now() + $5::bigint * interval '1 microsecond',
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1::uuid AND fence = $2 AND lease_owner = $3 AND state = 'processing'`,
		l.ID, l.Fence, owner, truncateError(lastError), delay.Microseconds())
	if err != nil {
		return false, fmt.Errorf("outboxfeed: retry: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// DeadLetter moves a held lease to dead_letter, burning an attempt.
func (s *PGStore) DeadLetter(ctx context.Context, owner string, l Lease, reason string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `
UPDATE herald.outbox
SET state = 'dead_letter', attempt = attempt + 1, last_error = $4, dead_lettered_at = now(),
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1::uuid AND fence = $2 AND lease_owner = $3 AND state = 'processing'`,
		l.ID, l.Fence, owner, truncateError(reason))
	if err != nil {
		return false, fmt.Errorf("outboxfeed: dead-letter: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Release gives held leases back to pending, attempt unchanged.
func (s *PGStore) Release(ctx context.Context, owner string, leases []Lease) (int, error) {
	if len(leases) == 0 {
		return 0, nil
	}
	ids, fences := splitLeases(leases)
	tag, err := s.pool.Exec(ctx, `
UPDATE herald.outbox o
SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL
FROM unnest($2::text[], $3::bigint[]) AS c(id, fence)
WHERE o.id = c.id::uuid AND o.fence = c.fence AND o.lease_owner = $1 AND o.state = 'processing'`,
		owner, ids, fences)
	if err != nil {
		return 0, fmt.Errorf("outboxfeed: release: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Get loads one record.
func (s *PGStore) Get(ctx context.Context, id string) (Record, error) {
	if !validUUID(id) {
		return Record{}, fmt.Errorf("%w: %q is not a uuid", ErrNotFound, id)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+pgRecordColumns+` FROM herald.outbox WHERE id = $1::uuid`, id)
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
	r, err := scanPGRecord(rows)
	if err != nil {
		return Record{}, fmt.Errorf("outboxfeed: get: %w", err)
	}
	return r, nil
}

// Stats counts the backlog with index-backed subqueries.
func (s *PGStore) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	var oldest *time.Time
	err := s.pool.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM herald.outbox WHERE state = 'pending')
	  + (SELECT count(*) FROM herald.outbox WHERE state = 'processing'),
	(SELECT count(*) FROM herald.outbox WHERE state = 'dead_letter'),
	least(
	  (SELECT occurred_at FROM herald.outbox WHERE state = 'pending' ORDER BY seq LIMIT 1),
	  (SELECT min(occurred_at) FROM herald.outbox WHERE state = 'processing'))`).
		Scan(&st.Pending, &st.DeadLetter, &oldest)
	if err != nil {
		return Stats{}, fmt.Errorf("outboxfeed: stats: %w", err)
	}
	if oldest != nil {
		st.OldestPending = *oldest
	}
	return st, nil
}

func scanPGRecord(rows pgx.Rows) (Record, error) {
	var r Record
	var c stateColumns
	err := rows.Scan(&r.ID, &r.Seq, &r.TenantID, &r.Channel, &r.Type, &r.SchemaVersion,
		(*[]byte)(&r.Payload), (*[]byte)(&r.Freshness), &r.OccurredAt, &r.Kind,
		&c.state, &c.attempt, &c.nextAttemptAt, &c.leaseOwner, &c.leaseExpiresAt, &c.fence,
		&c.lastError, &c.dispatchedAt, &c.deadLetteredAt)
	if err != nil {
		return Record{}, err
	}
	r.Attempt, r.Fence = c.attempt, c.fence
	r.State, err = c.toState()
	return r, err
}

func splitLeases(leases []Lease) ([]string, []int64) {
	ids := make([]string, len(leases))
	fences := make([]int64, len(leases))
	for i, l := range leases {
		ids[i], fences[i] = l.ID, l.Fence
	}
	return ids, fences
}
