package outboxfeed

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
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

// pgClaim claims in one statement, in two stages.
//
// Stage one looks at a window of the oldest unresolved records (pending or
// processing, in seq order, at most $4 of them):
//
//   - A record is ok when it is pending and due, or processing under an
//     expired lease (taken over: the attempt that lease stood for failed).
//   - A channel is busy while it has a record in processing under a live
//     lease (whatever its seq), and stuck from its first record that is
//     pending but not yet due (a retry waiting for its time).
//   - A record is pickable when it is ok, its channel is not busy and no
//     earlier record of its channel in the window is not ok (found for all
//     channels at once by one hash aggregate). The first pickable records
//     in seq order are claimed; a channel's records are thus claimed as a
//     prefix, in order.
//
// The window starts at the head of the line, so a record the window does
// not reach has nothing earlier outside it. When the window is full and
// holds records of fewer than $11 channels, a few channels' bursts fill
// the head of the line, each going out one record after another, and the
// channels whose records all lie beyond the window would wait for them
// all; so stage one then leaves $8 of the batch to stage two, which
// walks channel by channel (outbox_channel_head_idx, one probe each) from
// the cursor ($6, $7) for at most $9 channels, takes the channels whose
// first unresolved record lies beyond the window, and claims of each the
// pickable prefix of its first $10 records (same rules). The walk resumes
// after the cursor the claim returns (NULL: start over), so every channel
// is reached within a bounded number of claims however long the head of
// the line is.
//
// Taking an expired lease over burns an attempt (attempt+1, last_error
// 'lease of <owner> expired'); when that reaches $5 (> 0) the record is
// dead-lettered instead. A record to take over whose row another
// transaction holds is skipped (FOR UPDATE SKIP LOCKED) rather than waited
// for: that is the late Worker completing it, whose cycle may in turn be
// waiting for the claim lock this claim holds. Every update re-checks its condition on the row's
// current version; a picked record whose row changed meanwhile is skipped,
// and then the records picked after it in its channel are flagged
// (behind), for the Worker to give back unpublished: order first.
//
// The result always has one row per record claimed or dead-lettered, or
// one row of NULL record columns, each led by what the Worker sizes its
// next claims by (claimWindow): the window's size, the position in it of
// the last record picked, how many of it are stuck behind retries, how
// many pickable records were left for others, and the next cursor.
const pgClaim = `
WITH RECURSIVE head AS MATERIALIZED (
	SELECT ` + pgClaimFlags + `
	WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL
	ORDER BY seq
	LIMIT $4
), win AS MATERIALIZED (
	-- The channels of a full window are counted (by hashing, lazily: AND
	-- stops at the first false) only when stage two may run.
	SELECT scanned, last, $8 > 0 AND scanned >= $4 AND (SELECT count(*) FROM (
	           SELECT DISTINCT tenant_id, channel FROM head LIMIT $11) d) < $11 AS is_full
	FROM (SELECT count(*) AS scanned, coalesce(max(seq), 0) AS last FROM head) w
), blocked AS MATERIALIZED (
	SELECT tenant_id, channel, min(seq) AS stop, bool_or(busy) AS busy
	FROM head WHERE NOT ok GROUP BY tenant_id, channel
), pickable AS MATERIALIZED (
	SELECT h.tid, h.seq, h.takeover, h.tenant_id, h.channel
	FROM head h LEFT JOIN blocked b ON b.tenant_id = h.tenant_id AND b.channel = h.channel
	WHERE h.ok AND (b.stop IS NULL OR (NOT b.busy AND h.seq < b.stop))
), near AS MATERIALIZED (
	SELECT tid, seq, takeover, tenant_id, channel FROM pickable ORDER BY seq
	LIMIT $2 - CASE WHEN (SELECT is_full FROM win) THEN $8 ELSE 0 END
), chans AS (
	(SELECT 1 AS n, tenant_id, channel, seq AS first FROM herald.outbox
	 WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL
	   AND (tenant_id, channel) > ($6::text, $7::text) AND (SELECT is_full FROM win)
	 ORDER BY tenant_id, channel, seq LIMIT 1)
	UNION ALL
	SELECT c.n + 1, x.tenant_id, x.channel, x.seq FROM chans c CROSS JOIN LATERAL (
		SELECT tenant_id, channel, seq FROM herald.outbox
		WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL AND (tenant_id, channel) > (c.tenant_id, c.channel)
		ORDER BY tenant_id, channel, seq LIMIT 1) x
	WHERE c.n < $9
), far AS MATERIALIZED (
	SELECT c.n, r.* FROM chans c CROSS JOIN LATERAL (
		SELECT ` + pgClaimFlags + `
		WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL AND tenant_id = c.tenant_id AND channel = c.channel
		ORDER BY seq LIMIT $10) r
	WHERE c.first > (SELECT last FROM win)
), farblocked AS MATERIALIZED (
	SELECT n, min(seq) FILTER (WHERE NOT ok) AS stop, bool_or(busy) AS busy FROM far GROUP BY n
), farpickable AS MATERIALIZED (
	SELECT f.n, f.tid, f.seq, f.takeover, f.tenant_id, f.channel
	FROM far f JOIN farblocked b ON b.n = f.n
	WHERE f.ok AND NOT b.busy AND (b.stop IS NULL OR f.seq < b.stop)
), farpick AS MATERIALIZED (
	SELECT * FROM farpickable ORDER BY n, seq LIMIT $2 - (SELECT count(*) FROM near)
), pick AS MATERIALIZED (
	SELECT tid, seq, takeover, tenant_id, channel FROM near
	UNION ALL SELECT tid, seq, takeover, tenant_id, channel FROM farpick
), seized AS MATERIALIZED (
	SELECT o.ctid AS tid FROM herald.outbox o
	WHERE o.ctid = ANY(ARRAY(SELECT tid FROM pick WHERE takeover))
	FOR UPDATE SKIP LOCKED
), claimed AS (
	UPDATE herald.outbox o
	SET state = 'processing', lease_owner = $1,
	    lease_expires_at = statement_timestamp() + $3::bigint * interval '1 microsecond',
	    fence = o.fence + 1,
	    attempt = o.attempt + CASE WHEN o.state = 'processing' THEN 1 ELSE 0 END,
	    last_error = CASE WHEN o.state = 'processing' THEN 'lease of ' || o.lease_owner || ' expired' ELSE o.last_error END
	FROM pick
	WHERE o.ctid = pick.tid AND (NOT pick.takeover OR pick.tid IN (SELECT tid FROM seized)) AND (
	      (o.state = 'pending' AND o.next_attempt_at <= statement_timestamp())
	   OR (o.state = 'processing' AND o.lease_expires_at < statement_timestamp()
	       AND ($5 = 0 OR o.attempt + 1 < $5)))
	RETURNING o.ctid::text AS place, ` + pgRecordColumnsQualified + `
), exhausted AS (
	UPDATE herald.outbox o
	SET state = 'dead_letter', attempt = o.attempt + 1, dead_lettered_at = statement_timestamp(),
	    last_error = 'gave up after ' || (o.attempt + 1) || ' attempts: lease of ' || o.lease_owner || ' expired',
	    lease_owner = NULL, lease_expires_at = NULL
	FROM pick
	WHERE pick.takeover AND pick.tid IN (SELECT tid FROM seized) AND $5 > 0 AND o.ctid = pick.tid
	  AND o.state = 'processing' AND o.lease_expires_at < statement_timestamp() AND o.attempt + 1 >= $5
	RETURNING o.ctid::text AS place, ` + pgRecordColumnsQualified + `
), done AS (
	SELECT * FROM claimed UNION ALL SELECT * FROM exhausted
), skipped AS (
	SELECT tenant_id, channel, min(seq) AS seq FROM pick
	WHERE seq NOT IN (SELECT seq FROM done) GROUP BY tenant_id, channel
), resume AS (
	SELECT CASE
		WHEN (SELECT count(*) FROM farpick) > 0 AND (SELECT count(*) FROM farpick) >= $2 - (SELECT count(*) FROM near)
			THEN (SELECT max(n) FROM farpick)
		WHEN (SELECT count(*) FROM chans) >= $9 THEN $9
	END AS n
), n AS (
	SELECT (SELECT scanned FROM win) AS scanned,
	       (SELECT count(*) FROM head WHERE seq <= (SELECT max(seq) FROM near)) AS depth,
	       (SELECT count(*) FROM head h JOIN blocked b ON b.tenant_id = h.tenant_id AND b.channel = h.channel
	        WHERE NOT b.busy AND h.seq >= b.stop) AS stuck,
	       (SELECT count(*) FROM pickable p WHERE NOT EXISTS (
	        SELECT 1 FROM near k WHERE k.tenant_id = p.tenant_id AND k.channel = p.channel))
	       + (SELECT count(*) FROM farpickable) - (SELECT count(*) FROM farpick) AS spare,
	       c.tenant_id AS next_tenant, c.channel AS next_channel
	FROM resume LEFT JOIN chans c ON c.n = resume.n
)
SELECT n.scanned, n.depth, n.stuck, n.spare, n.next_tenant, n.next_channel,
       coalesce(done.seq > s.seq, false) AS behind, done.*
FROM n LEFT JOIN done ON true LEFT JOIN skipped s ON s.tenant_id = done.tenant_id AND s.channel = done.channel`

// pgClaimFlags is what both stages of pgClaim read of an unresolved
// record: where it is, and whether it is ok to claim, holds its channel
// (busy) or is a takeover.
const pgClaimFlags = `ctid AS tid, seq, tenant_id, channel,
	CASE state WHEN 'pending' THEN next_attempt_at <= statement_timestamp()
	           ELSE lease_expires_at < statement_timestamp() END AS ok,
	state = 'processing' AND lease_expires_at >= statement_timestamp() AS busy,
	state = 'processing' AS takeover
	FROM herald.outbox`

const pgRecordColumnsQualified = `o.id::text, o.seq, o.tenant_id, o.channel, o.type, o.schema_version,
	o.payload, o.freshness, o.occurred_at, o.kind, o.state, o.attempt, o.next_attempt_at,
	o.lease_owner, o.lease_expires_at, o.fence, o.last_error, o.dispatched_at, o.dead_lettered_at`

// pgLeaseMatch selects the rows whose lease $1 still holds among the ids $2
// with the "id/fence" pairs $3: an index probe per id, then a hashed check
// of the pair (robust to stale planner statistics, unlike a join).
const pgLeaseMatch = `id = ANY($2::text[]::uuid[]) AND id::text || '/' || fence = ANY($3::text[])
	AND lease_owner = $1 AND state = 'processing'`

const pgComplete = `UPDATE herald.outbox
SET state = 'dispatched', dispatched_at = statement_timestamp(), lease_owner = NULL, lease_expires_at = NULL
WHERE ` + pgLeaseMatch

// pgCompleteAt completes by row version ($4, from the claim) first — no
// index lookup — then by id the leases whose row version moved (only an
// operator's VACUUM FULL or CLUSTER moves a row nobody else updated).
const pgCompleteAt = `
WITH c AS (
	SELECT * FROM unnest($4::text[]::tid[], $2::text[]::uuid[], $5::bigint[]) AS c(place, id, fence)
), by_place AS (
	UPDATE herald.outbox o
	SET state = 'dispatched', dispatched_at = statement_timestamp(), lease_owner = NULL, lease_expires_at = NULL
	FROM c
	WHERE o.ctid = c.place AND o.id = c.id AND o.fence = c.fence AND o.lease_owner = $1 AND o.state = 'processing'
	RETURNING o.id
), by_id AS (
	UPDATE herald.outbox
	SET state = 'dispatched', dispatched_at = statement_timestamp(), lease_owner = NULL, lease_expires_at = NULL
	WHERE (SELECT count(*) FROM by_place) < cardinality($2::text[]::uuid[])
	  AND id = ANY(ARRAY(SELECT unnest($2::text[]::uuid[]) EXCEPT ALL SELECT id FROM by_place))
	  AND id::text || '/' || fence = ANY($3::text[]) AND lease_owner = $1 AND state = 'processing'
	RETURNING id
)
SELECT (SELECT count(*) FROM by_place) + (SELECT count(*) FROM by_id)`

// pgCycleSettings starts a claim cycle's transaction (see claimCycle).
// Index scans are off for the completion, which goes by row position (a
// TID scan) or by a bitmap scan of the primary key: planned on a small
// table, it would otherwise walk the whole primary key and filter, and
// keep that plan as the table grows. pgClaimLock turns them back on: the
// claim walks its indexes in order.
const pgCycleSettings = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('enable_seqscan', 'off', true), set_config('enable_mergejoin', 'off', true),
	set_config('enable_indexscan', 'off', true)`

// pgClaimLock serializes claimers (see Claim) and restores index scans
// for the claim (see pgCycleSettings).
const pgClaimLock = `SELECT pg_advisory_xact_lock($1), set_config('enable_indexscan', 'on', true)`

// pgArm arms the wake-up trigger until $1 µs from now; pgDisarm disarms it.
const (
	pgArm    = `UPDATE herald.outbox_wakeup SET armed_until = statement_timestamp() + $1::bigint * interval '1 microsecond'`
	pgDisarm = `UPDATE herald.outbox_wakeup SET armed_until = NULL WHERE armed_until IS NOT NULL`
)

// Claim claims a batch (taking over expired leases, each burning an
// attempt) in one short transaction serialized with other claimers by an
// advisory lock. When the head of the line is mostly stuck behind retries
// not yet due, it looks further down the line (see Worker.resizeWindow).
func (s *PGStore) Claim(ctx context.Context, owner string, limit int, lease time.Duration) ([]Record, error) {
	req := claimRequest{owner: owner, limit: limit, lease: lease, window: defaultWindow(limit)}
	var out []Record
	for {
		res, err := s.claimCycle(ctx, req)
		if err != nil {
			return out, err
		}
		out = append(out, res.claimed...)
		if len(res.behind) > 0 {
			if _, err := s.Release(ctx, owner, leasesOfRecords(res.behind)); err != nil {
				return out, err
			}
		}
		req.cursor = res.next
		got := len(res.claimed) + len(res.exhausted) + len(res.behind)
		req.limit -= got
		if req.limit <= 0 || res.scanned < req.window || 2*res.stuck < res.scanned-got || req.window >= limit*maxWindowFactor {
			return out, nil
		}
		req.window = min(4*req.window, limit*maxWindowFactor)
	}
}

// claimCycle completes req.complete and claims the next batch in one
// implicit transaction, sent as one pipelined round trip.
func (s *PGStore) claimCycle(ctx context.Context, req claimRequest) (claimResult, error) {
	var res claimResult
	if req.limit <= 0 && len(req.complete) == 0 {
		return res, nil
	}
	b := &pgx.Batch{}
	// The cycle's plans do not depend on their parameters: plan them once
	// per connection, not at each of the first executions. That plan may be
	// made while the table is nearly empty, when reading all of it looks
	// cheapest; it then stays while the table grows, until the next
	// ANALYZE. Every statement of the cycle has an index or row position
	// to go by, so sequential scans are ruled out (and more: see
	// pgCycleSettings).
	if req.asyncCommit {
		b.Queue(pgCycleSettings + `, set_config('synchronous_commit', 'off', true)`)
	} else {
		b.Queue(pgCycleSettings)
	}
	completeAt := len(req.complete) > 0 && len(req.completeAt) == len(req.complete)
	switch {
	case completeAt:
		ids, pairs := leaseArgs(req.complete)
		fences := make([]int64, len(req.complete))
		for i, l := range req.complete {
			fences[i] = l.Fence
		}
		b.Queue(pgCompleteAt, req.owner, ids, pairs, req.completeAt, fences)
	case len(req.complete) > 0:
		ids, pairs := leaseArgs(req.complete)
		b.Queue(pgComplete, req.owner, ids, pairs)
	}
	switch {
	case s.cfg.DisableNotifyTrigger:
	case req.arm > 0:
		b.Queue(pgArm, req.arm.Microseconds())
	case req.disarm:
		b.Queue(pgDisarm)
	}
	if req.limit > 0 {
		// The lock comes after the completion, which thus runs beside
		// another lane's claim; the claim skips rows a completion holds
		// (see pgClaim), so the two cannot deadlock.
		b.Queue(pgClaimLock, pgClaimLockKey)
		far := farPlan(req.limit)
		b.Queue(pgClaim, req.owner, req.limit, req.lease.Microseconds(), req.windowOrDefault(), req.maxAttempts,
			req.cursor.Tenant, req.cursor.Channel, far.reserve, far.channels, far.prefix, far.spread)
	}
	err := func() error {
		br := s.pool.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		switch {
		case completeAt:
			if err := br.QueryRow().Scan(&res.completed); err != nil {
				return err
			}
		case len(req.complete) > 0:
			tag, err := br.Exec()
			if err != nil {
				return err
			}
			res.completed = int(tag.RowsAffected())
		}
		if !s.cfg.DisableNotifyTrigger && (req.arm > 0 || req.disarm) {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if req.limit <= 0 {
			return br.Close()
		}
		if _, err := br.Exec(); err != nil { // the claim lock
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		row := newPGClaimRow(&res)
		for rows.Next() {
			if err := row.scan(rows, &res); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return br.Close()
	}()
	if err != nil {
		return claimResult{}, fmt.Errorf("outboxfeed: claim: %w", err)
	}
	sort.Sort(bySeqWithPlace{res.claimed, res.places})
	sortBySeq(res.behind)
	return res, nil
}

// bySeqWithPlace sorts claimed records by seq (RETURNING has no order),
// keeping each one's place beside it.
type bySeqWithPlace struct {
	recs   []Record
	places []string
}

func (b bySeqWithPlace) Len() int           { return len(b.recs) }
func (b bySeqWithPlace) Less(i, j int) bool { return b.recs[i].Seq < b.recs[j].Seq }
func (b bySeqWithPlace) Swap(i, j int) {
	b.recs[i], b.recs[j] = b.recs[j], b.recs[i]
	b.places[i], b.places[j] = b.places[j], b.places[i]
}

// pgClaimRow holds the scan targets of pgClaim's rows. One is made per
// claim and reused for each row: targets handed to Scan escape, so
// declaring them per row would cost some twenty allocations a record.
// Columns with few distinct values (tenant, type, kind, state, lease
// owner) are interned for the claim.
type pgClaimRow struct {
	place, id, channel, nextTenant, nextChannel                pgtype.Text
	tenant, typ, kind, state, leaseOwner, lastError            internedText
	seq, fence                                                 pgtype.Int8
	version, attempt                                           pgtype.Int4
	occurred, next, leaseExpiresAt, dispatchedAt, deadLettered pgtype.Timestamptz
	behind                                                     bool
	payload, freshness                                         []byte
	dest                                                       []any
}

// newPGClaimRow makes the scan targets of one claim, whose window figures
// land in res.
func newPGClaimRow(res *claimResult) *pgClaimRow {
	r := &pgClaimRow{}
	strs := make(map[string]string, 8)
	for _, t := range []*internedText{&r.tenant, &r.typ, &r.kind, &r.state, &r.leaseOwner, &r.lastError} {
		t.table = strs
	}
	r.dest = []any{&res.scanned, &res.depth, &res.stuck, &res.spare, &r.nextTenant, &r.nextChannel, &r.behind,
		&r.place, &r.id, &r.seq, &r.tenant, &r.channel, &r.typ, &r.version,
		&r.payload, &r.freshness, &r.occurred, &r.kind,
		&r.state, &r.attempt, &r.next, &r.leaseOwner, &r.leaseExpiresAt, &r.fence,
		&r.lastError, &r.dispatchedAt, &r.deadLettered}
	return r
}

// scan reads one row of pgClaim into res. The record columns are NULL
// when nothing was claimed.
func (row *pgClaimRow) scan(rows pgx.Rows, res *claimResult) error {
	if err := rows.Scan(row.dest...); err != nil {
		return err
	}
	res.next = fanout.Key{Tenant: row.nextTenant.String, Channel: row.nextChannel.String}
	if !row.id.Valid {
		return nil // no record: nothing was claimed
	}
	if !row.place.Valid || !row.seq.Valid || !row.tenant.valid || !row.channel.Valid || !row.typ.valid ||
		!row.version.Valid || !row.occurred.Valid || !row.kind.valid || !row.state.valid || !row.attempt.Valid ||
		!row.next.Valid || !row.fence.Valid {
		return fmt.Errorf("%w: NULL column in claimed record %s", ErrCorruptRecord, row.id.String)
	}
	r := Record{
		ID: row.id.String, Seq: row.seq.Int64, TenantID: row.tenant.s, Channel: row.channel.String,
		Type: row.typ.s, SchemaVersion: int(row.version.Int32), Payload: row.payload, Freshness: row.freshness,
		OccurredAt: row.occurred.Time, Kind: row.kind.s, Attempt: int(row.attempt.Int32), Fence: row.fence.Int64,
		jsonPayload: true,
	}
	// toState copies what it keeps, so the pointers into row are safe.
	c := stateColumns{state: row.state.s, attempt: r.Attempt, nextAttemptAt: row.next.Time, fence: r.Fence}
	if row.leaseOwner.valid {
		c.leaseOwner = &row.leaseOwner.s
	}
	if row.lastError.valid {
		c.lastError = &row.lastError.s
	}
	if row.leaseExpiresAt.Valid {
		c.leaseExpiresAt = &row.leaseExpiresAt.Time
	}
	if row.dispatchedAt.Valid {
		c.dispatchedAt = &row.dispatchedAt.Time
	}
	if row.deadLettered.Valid {
		c.deadLetteredAt = &row.deadLettered.Time
	}
	var err error
	if r.State, err = c.toState(); err != nil {
		return err
	}
	if _, dead := r.State.(DeadLetter); dead {
		res.exhausted = append(res.exhausted, r)
	} else if row.behind {
		res.behind = append(res.behind, r)
	} else {
		res.claimed = append(res.claimed, r)
		res.places = append(res.places, row.place.String)
	}
	return nil
}

// internedText scans a text column, reusing the string of an equal value
// scanned before into any target sharing its table.
type internedText struct {
	s     string
	valid bool
	table map[string]string
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
	if len(t.table) < maxInterned {
		t.table[t.s] = t.s
	}
	return nil
}

// Complete marks held leases dispatched in one statement.
func (s *PGStore) Complete(ctx context.Context, owner string, leases []Lease) (int, error) {
	if len(leases) == 0 {
		return 0, nil
	}
	ids, pairs := leaseArgs(leases)
	tag, err := s.pool.Exec(ctx, pgComplete, owner, ids, pairs)
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
    next_attempt_at = statement_timestamp() + $5::bigint * interval '1 microsecond',
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
SET state = 'dead_letter', attempt = attempt + 1, last_error = $4, dead_lettered_at = statement_timestamp(),
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
	ids, pairs := leaseArgs(leases)
	tag, err := s.pool.Exec(ctx, `UPDATE herald.outbox
SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL
WHERE `+pgLeaseMatch, owner, ids, pairs)
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

// Stats counts the backlog on the unresolved index. OldestPending is the
// oldest occurred_at among the first pgStatsHead records of the line.
func (s *PGStore) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	var oldest *time.Time
	err := s.pool.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM herald.outbox WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL),
	(SELECT count(*) FROM herald.outbox WHERE dead_lettered_at IS NOT NULL),
	(SELECT min(occurred_at) FROM (SELECT occurred_at FROM herald.outbox
		WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL ORDER BY seq LIMIT $1) h),
	now()`, pgStatsHead).
		Scan(&st.Pending, &st.DeadLetter, &oldest, &st.Now)
	if err != nil {
		return Stats{}, fmt.Errorf("outboxfeed: stats: %w", err)
	}
	if oldest != nil {
		st.OldestPending = *oldest
	}
	return st, nil
}

// pgStatsHead is how many records at the head of the line Stats looks at
// for the oldest one (occurred_at is the producer's, not in seq order).
const pgStatsHead = 1000

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

// leaseArgs returns the ids of leases and their "id/fence" pairs, for
// pgLeaseMatch.
func leaseArgs(leases []Lease) ([]string, []string) {
	ids := make([]string, len(leases))
	pairs := make([]string, len(leases))
	for i, l := range leases {
		ids[i] = strings.ToLower(l.ID) // as uuid::text prints it
		pairs[i] = ids[i] + "/" + strconv.FormatInt(l.Fence, 10)
	}
	return ids, pairs
}
