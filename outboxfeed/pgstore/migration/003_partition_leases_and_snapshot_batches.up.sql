-- migration 3 replaces per-record claims with partition leases and
-- snapshot-bounded batches.
--
--   - herald.outbox keeps only what producers write, plus seq (insertion
--     order), xid (the inserting transaction, xid8) and part (the
--     partition: a stable hash of tenant and channel modulo the partition
--     count, computed by herald.outbox_partition_of). It is partitioned by
--     seq into segments, so retention drops whole segments instead of
--     deleting rows. Producers' inserts cost one heap row and three index
--     entries, as before.
--   - herald.outbox_partition holds one lease row per partition: owner,
--     expiry and fence, and the position: every record whose transaction is
--     visible in lo is done; of those visible in hi and not in lo, the ones
--     up to (pos_xid, pos_seq) are done.
--   - herald.outbox_retry is the retry queue: a full copy of each record
--     that failed (or was held behind one that failed), dead-lettered or
--     replayed, with its attempt, next attempt, last error and completion
--     time. Only failures write per record.
--   - herald.outbox_batch logs each completed batch (one row per batch), so
--     a record's completion time can be derived.
--
-- The records of the previous table are moved: pending and processing
-- ones with no failed attempt into herald.outbox as records of this
-- migration's transaction (delivered once after it commits), the others
-- into the retry queue with their state. The old table stays as
-- herald.outbox_v2, empty of pending work, with a trigger that forwards
-- an insert a producer still had in flight into herald.outbox; drop it
-- when convenient (docs/runbooks/upgrade.md).

ALTER TABLE herald.outbox RENAME TO outbox_v2;
ALTER INDEX herald.outbox_pkey RENAME TO outbox_v2_pkey;
DROP TRIGGER IF EXISTS outbox_notify ON herald.outbox_v2;

CREATE SEQUENCE herald.outbox_record_seq;
SELECT setval('herald.outbox_record_seq', coalesce((SELECT max(seq) FROM herald.outbox_v2), 0) + 1, false);

-- Replaced (never altered in place) by SetPartitions; see there.
CREATE FUNCTION herald.outbox_partition_of(tenant_id text, channel text) RETURNS int
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $fn$ SELECT ((hashtextextended(tenant_id || '/' || channel, 0) & 9223372036854775807) % 4)::int $fn$;

CREATE TABLE herald.outbox (
	id               uuid        NOT NULL DEFAULT gen_random_uuid(),
	seq              bigint      NOT NULL DEFAULT nextval('herald.outbox_record_seq'),
	xid              xid8        NOT NULL DEFAULT pg_current_xact_id(),
	tenant_id        text        NOT NULL,
	channel          text        NOT NULL,
	type             text        NOT NULL
		CONSTRAINT outbox_type_format CHECK (length(type) BETWEEN 1 AND 128
			AND ltrim(type, 'abcdefghijklmnopqrstuvwxyz0123456789_.-') = ''),
	schema_version   int         NOT NULL
		CONSTRAINT outbox_schema_version_positive CHECK (schema_version >= 1),
	payload          jsonb       NOT NULL,
	freshness        jsonb       NOT NULL DEFAULT '{"mode":"immediate"}'
		CONSTRAINT outbox_freshness_mode CHECK (
			freshness->>'mode' = 'immediate'
			OR (freshness->>'mode' = 'advisory' AND coalesce(freshness->>'authority', '') <> '')),
	occurred_at      timestamptz NOT NULL DEFAULT now(),
	kind             text        NOT NULL DEFAULT 'notification'
		CONSTRAINT outbox_kind CHECK (kind IN ('notification', 'integration_event', 'journey_step_command', 'provider_side_effect')),
	part             int         NOT NULL GENERATED ALWAYS AS (herald.outbox_partition_of(tenant_id, channel)) STORED
) PARTITION BY RANGE (seq);
CREATE TABLE herald.outbox_default PARTITION OF herald.outbox DEFAULT;
-- The segments Herald made (see pg_segments.go); the Pruner keeps some
-- ahead of the current seq.
CREATE TABLE herald.outbox_segment (
	name       text        PRIMARY KEY,
	from_seq   bigint      NOT NULL,
	to_seq     bigint      NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT outbox_segment_range CHECK (from_seq < to_seq)
);
-- A claim reads one partition's records in (xid, seq) order, and every
-- lookup of a record Herald makes goes by (part, xid, seq) or by id. There
-- is no index on seq alone, so no plan can prefer walking the table in seq
-- order (and producers pay one index entry less).
CREATE INDEX outbox_part_xid_idx ON herald.outbox (part, xid, seq);
CREATE INDEX outbox_id_idx ON herald.outbox (id);

CREATE TABLE herald.outbox_partition (
	part       int         PRIMARY KEY,
	owner      text,
	expires_at timestamptz,
	fence      bigint      NOT NULL DEFAULT 0,
	lo         pg_snapshot NOT NULL,
	hi         pg_snapshot,
	pos_xid    xid8        NOT NULL DEFAULT '0',
	pos_seq    bigint      NOT NULL DEFAULT 0,
	open       boolean     NOT NULL DEFAULT false,
	takeovers  int         NOT NULL DEFAULT 0,
	-- active: claimed by Workers; retiring: replaced by a new partition
	-- count, claimed until its position passes retire_xmax (every
	-- transaction that could stage into it has finished); waiting: of the
	-- new count, claimed once no partition is retiring; retired: done.
	state      text        NOT NULL DEFAULT 'active'
		CONSTRAINT outbox_partition_state CHECK (state IN ('active', 'retiring', 'waiting', 'retired')),

	claimed_at timestamptz,
	done_at    timestamptz,
	batches    bigint      NOT NULL DEFAULT 0,
	CONSTRAINT outbox_partition_lease CHECK ((owner IS NULL) = (expires_at IS NULL)),
	CONSTRAINT outbox_partition_open CHECK (NOT open OR owner IS NOT NULL)
) WITH (fillfactor = 10);
-- The starting position: a snapshot in which this transaction's xid is not
-- visible, so the records moved below are delivered once this migration
-- commits. pg_current_snapshot() alone will not do: it never lists the
-- current transaction among those in progress, so once a later xid has
-- completed (any transaction in the cluster), pg_visible_in_snapshot
-- would call this one visible and the moved records done. Its xmax is
-- therefore this transaction's xid; transactions between it and the
-- current xmax that completed before now staged nothing into this new
-- table, which they could not see.
INSERT INTO herald.outbox_partition (part, lo)
SELECT g, (least(pg_snapshot_xmin(c.s), c.x)::text || ':' || c.x::text || ':' || coalesce((
		SELECT string_agg(i::text, ',' ORDER BY i) FROM pg_snapshot_xip(c.s) AS i WHERE i < c.x), ''))::pg_snapshot
FROM generate_series(0, 3) g, (SELECT pg_current_snapshot() AS s, pg_current_xact_id() AS x) AS c;
-- The barrier of a change of the partition count (see SetPartitions).
CREATE TABLE herald.outbox_repartition (
	id          boolean PRIMARY KEY DEFAULT true CONSTRAINT outbox_repartition_one_row CHECK (id),
	retire_xmax xid8
);
INSERT INTO herald.outbox_repartition DEFAULT VALUES;

CREATE TABLE herald.outbox_retry (
	qseq             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id               uuid        NOT NULL,
	seq              bigint      NOT NULL,
	-- The record's row in herald.outbox, when it has one: (rec_part, xid,
	-- seq). part is the partition that consumes the queued record (it
	-- changes when the partition count does).
	xid              xid8,
	rec_part         int,
	part             int         NOT NULL,
	tenant_id        text        NOT NULL,
	channel          text        NOT NULL,
	type             text        NOT NULL,
	schema_version   int         NOT NULL,
	payload          jsonb       NOT NULL,
	freshness        jsonb       NOT NULL,
	occurred_at      timestamptz NOT NULL,
	kind             text        NOT NULL,
	state            text        NOT NULL
		CONSTRAINT outbox_retry_state CHECK (state IN ('pending', 'dispatched', 'dead_letter')),
	attempt          int         NOT NULL DEFAULT 0 CONSTRAINT outbox_retry_attempt CHECK (attempt >= 0),
	next_attempt_at  timestamptz NOT NULL DEFAULT now(),
	last_error       text,
	dispatched_at    timestamptz,
	dead_lettered_at timestamptz,
	CONSTRAINT outbox_retry_pending_columns CHECK (state <> 'pending' OR (dispatched_at IS NULL AND dead_lettered_at IS NULL)),
	CONSTRAINT outbox_retry_dispatched_columns CHECK (state <> 'dispatched' OR (dispatched_at IS NOT NULL AND dead_lettered_at IS NULL)),
	CONSTRAINT outbox_retry_dead_letter_columns CHECK (state <> 'dead_letter' OR (
		dead_lettered_at IS NOT NULL AND last_error IS NOT NULL AND dispatched_at IS NULL))
);
CREATE INDEX outbox_retry_pending_idx ON herald.outbox_retry (part, tenant_id, channel, qseq) WHERE state = 'pending';
CREATE INDEX outbox_retry_id_idx ON herald.outbox_retry (id);
CREATE INDEX outbox_retry_seq_idx ON herald.outbox_retry (seq);
CREATE INDEX outbox_retry_dead_letter_idx ON herald.outbox_retry (dead_lettered_at) WHERE dead_lettered_at IS NOT NULL;
CREATE INDEX outbox_retry_dispatched_idx ON herald.outbox_retry (dispatched_at) WHERE dispatched_at IS NOT NULL;

CREATE TABLE herald.outbox_batch (
	part     int         NOT NULL,
	fence    bigint      NOT NULL,
	lo       pg_snapshot NOT NULL,
	hi       pg_snapshot NOT NULL,
	from_xid xid8        NOT NULL,
	from_seq bigint      NOT NULL,
	to_xid   xid8        NOT NULL,
	to_seq   bigint      NOT NULL,
	records  int         NOT NULL,
	done_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_batch_done_idx ON herald.outbox_batch (part, done_at);

-- Move the previous table's records. A channel with a record waiting for
-- a retry goes to the retry queue whole (its records not yet dispatched,
-- in seq order), so it keeps its order and backoff; the records of other
-- channels not yet dispatched become records of this transaction.
CREATE TEMPORARY TABLE outbox_v2_waiting ON COMMIT DROP AS
	SELECT DISTINCT tenant_id, channel FROM herald.outbox_v2
	WHERE state IN ('pending', 'processing') AND attempt > 0;
INSERT INTO herald.outbox (id, seq, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind)
	SELECT o.id, o.seq, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness, o.occurred_at, o.kind
	FROM herald.outbox_v2 o WHERE o.state IN ('pending', 'processing')
		AND NOT EXISTS (SELECT 1 FROM outbox_v2_waiting w WHERE w.tenant_id = o.tenant_id AND w.channel = o.channel)
	ORDER BY o.seq;
INSERT INTO herald.outbox_retry (id, seq, part, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind,
		state, attempt, next_attempt_at, last_error, dispatched_at, dead_lettered_at)
	SELECT o.id, o.seq, herald.outbox_partition_of(o.tenant_id, o.channel), o.tenant_id, o.channel, o.type, o.schema_version,
		o.payload, o.freshness, o.occurred_at, o.kind,
		CASE o.state WHEN 'processing' THEN 'pending' ELSE o.state END, o.attempt,
		CASE o.state WHEN 'pending' THEN o.next_attempt_at ELSE now() END,
		o.last_error, o.dispatched_at, o.dead_lettered_at
	FROM herald.outbox_v2 o
	WHERE o.state IN ('dispatched', 'dead_letter')
		OR EXISTS (SELECT 1 FROM outbox_v2_waiting w WHERE w.tenant_id = o.tenant_id AND w.channel = o.channel)
	ORDER BY o.seq;
DELETE FROM herald.outbox_v2;

CREATE FUNCTION herald.outbox_v2_forward() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	INSERT INTO herald.outbox (id, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind)
	VALUES (NEW.id, NEW.tenant_id, NEW.channel, NEW.type, NEW.schema_version, NEW.payload, NEW.freshness, NEW.occurred_at, NEW.kind);
	RETURN NULL;
END
$fn$;
CREATE TRIGGER outbox_v2_forward BEFORE INSERT ON herald.outbox_v2
	FOR EACH ROW EXECUTE FUNCTION herald.outbox_v2_forward();

-- outbox_retire retires a partition replaced by a new partition count once
-- every record that could be staged into it is done: its lo.xmin has
-- passed retire_xmax (the xmax of a snapshot taken after the new count was
-- committed) and no range is open. Its retry queue moves to the records'
-- new partitions, in order, so those channels stay held back there. When
-- no partition is retiring any more, the waiting ones become active.
CREATE FUNCTION herald.outbox_retire(p_part int) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
	l herald.outbox_partition;
	barrier xid8;
BEGIN
	UPDATE herald.outbox_repartition SET retire_xmax = pg_snapshot_xmax(pg_current_snapshot())
	WHERE retire_xmax IS NULL;
	SELECT retire_xmax INTO barrier FROM herald.outbox_repartition;
	SELECT * INTO l FROM herald.outbox_partition p WHERE p.part = p_part FOR UPDATE;
	IF l.state <> 'retiring' OR l.hi IS NOT NULL OR pg_snapshot_xmin(l.lo) < barrier THEN
		RETURN;
	END IF;
	UPDATE herald.outbox_retry r SET part = herald.outbox_partition_of(r.tenant_id, r.channel)
	WHERE r.part = p_part AND r.state = 'pending';
	UPDATE herald.outbox_partition p SET state = 'retired' WHERE p.part = p_part;
END
$fn$;

CREATE FUNCTION herald.outbox_claim(p_part int, p_owner text, p_lease interval, p_limit int, p_tries int)
RETURNS TABLE (r_kind "char", r_part int, r_fence bigint, r_takeovers int, r_qseq bigint, r_attempt int, r_due boolean,
	r_id uuid, r_seq bigint, r_xid xid8, r_tenant text, r_channel text, r_type text, r_version int,
	r_payload jsonb, r_freshness jsonb, r_occurred timestamptz, r_kind2 text)
-- The range is read in index order from the cursor: a bitmap scan would
-- read and sort the whole rest of the range for every batch.
LANGUAGE plpgsql SET enable_bitmapscan = off SET enable_seqscan = off AS $fn$
DECLARE
	l herald.outbox_partition;
	n int;
	found_q int;
	tries int := 0;
	tried int[] := '{}';
	start_xid xid8;
	start_seq bigint;
BEGIN
	-- The last retiring partition retired (by this or another claim):
	-- the waiting ones take over.
	IF EXISTS (SELECT 1 FROM herald.outbox_partition p WHERE p.state = 'waiting')
		AND NOT EXISTS (SELECT 1 FROM herald.outbox_partition p WHERE p.state = 'retiring') THEN
		UPDATE herald.outbox_partition p SET state = 'active' WHERE p.state = 'waiting';
	END IF;
	LOOP
		tries := tries + 1;
		-- Lock the row first, then take the snapshot in a statement of its
		-- own: a snapshot taken before waiting for another claim's update of
		-- the row could be older than the lo that claim wrote.
		IF p_part >= 0 THEN
			SELECT * INTO l FROM herald.outbox_partition p
			WHERE p.part = p_part AND p.state IN ('active', 'retiring')
				AND (p.owner IS NULL OR p.owner = p_owner OR p.expires_at < clock_timestamp())
			FOR UPDATE;
		ELSE
			-- Only a partition with work is leased: one that has a batch
			-- open (a takeover), is retiring, or has a record committed past
			-- its position or a retry due. An idle partition costs a few
			-- index probes and no write.
			SELECT * INTO l FROM herald.outbox_partition p
			WHERE p.state IN ('active', 'retiring') AND (p.owner IS NULL OR p.expires_at < clock_timestamp())
				AND p.part <> ALL (tried)
				AND (p.open OR p.hi IS NOT NULL OR p.state = 'retiring'
					OR EXISTS (SELECT 1 FROM herald.outbox o WHERE o.part = p.part AND (o.xid, o.seq) >= (pg_snapshot_xmax(p.lo), 0))
					OR EXISTS (SELECT 1 FROM pg_snapshot_xip(p.lo) x(xid)
						CROSS JOIN LATERAL (SELECT 1 FROM herald.outbox o WHERE o.part = p.part AND o.xid = x.xid LIMIT 1) o)
					OR EXISTS (SELECT 1 FROM herald.outbox_retry r WHERE r.part = p.part AND r.state = 'pending' AND r.next_attempt_at <= now()))
			ORDER BY p.claimed_at NULLS FIRST, p.part LIMIT 1 FOR UPDATE SKIP LOCKED;
		END IF;
		IF NOT FOUND THEN
			RETURN;
		END IF;
		tried := tried || l.part;
		UPDATE herald.outbox_partition p SET owner = p_owner, expires_at = clock_timestamp() + p_lease,
			fence = p.fence + 1, takeovers = CASE WHEN p.open THEN p.takeovers + 1 ELSE 0 END, open = true,
			hi = coalesce(p.hi, pg_current_snapshot()), claimed_at = clock_timestamp()
		WHERE p.part = l.part
		RETURNING p.* INTO l;

		IF l.pos_xid >= pg_snapshot_xmax(l.lo) THEN
			start_xid := l.pos_xid;
			start_seq := l.pos_seq;
		ELSE
			start_xid := pg_snapshot_xmax(l.lo);
			start_seq := -1;
		END IF;
		found_q := 0;
		IF EXISTS (SELECT 1 FROM herald.outbox_retry r WHERE r.part = l.part AND r.state = 'pending') THEN
			RETURN QUERY
			WITH heads AS (
				SELECT DISTINCT ON (r.tenant_id, r.channel) r.tenant_id, r.channel, r.next_attempt_at <= now() AS due
				FROM herald.outbox_retry r WHERE r.part = l.part AND r.state = 'pending'
				ORDER BY r.tenant_id, r.channel, r.qseq)
			SELECT 'q'::"char", l.part, l.fence, l.takeovers, r.qseq, r.attempt, true,
				r.id, r.seq, NULL::xid8, r.tenant_id, r.channel, r.type, r.schema_version,
				r.payload, r.freshness, r.occurred_at, r.kind
			FROM heads h JOIN LATERAL (
				SELECT * FROM herald.outbox_retry r WHERE r.part = l.part AND r.state = 'pending'
					AND r.tenant_id = h.tenant_id AND r.channel = h.channel ORDER BY r.qseq LIMIT p_limit) r ON true
			WHERE h.due;
			GET DIAGNOSTICS found_q = ROW_COUNT;
		END IF;

		RETURN QUERY
		SELECT 'r'::"char", l.part, l.fence, l.takeovers, NULL::bigint, 0, true,
			o.id, o.seq, o.xid, o.tenant_id, o.channel, o.type, o.schema_version,
			o.payload, o.freshness, o.occurred_at, o.kind
		FROM (
			(SELECT o.* FROM pg_snapshot_xip(l.lo) AS x(xid)
				CROSS JOIN LATERAL (SELECT * FROM herald.outbox o WHERE o.part = l.part AND o.xid = x.xid
					AND (o.xid, o.seq) > (l.pos_xid, l.pos_seq) AND pg_visible_in_snapshot(o.xid, l.hi)
					ORDER BY o.xid, o.seq LIMIT p_limit + 1) o
				ORDER BY o.xid, o.seq LIMIT p_limit + 1)
			UNION ALL
			-- One lower bound only (the later of lo's xmax and the cursor), so
			-- the index scan starts there rather than at the partition's first
			-- entry.
			(SELECT * FROM herald.outbox o WHERE o.part = l.part
				AND (o.xid, o.seq) > (start_xid, start_seq) AND o.xid < pg_snapshot_xmax(l.hi)
				AND pg_visible_in_snapshot(o.xid, l.hi)
				ORDER BY o.xid, o.seq LIMIT p_limit + 1)
		) o ORDER BY o.xid, o.seq LIMIT p_limit + 1;
		GET DIAGNOSTICS n = ROW_COUNT;

		IF n > 0 OR found_q > 0 THEN
			IF found_q > 0 OR n > 0 AND EXISTS (SELECT 1 FROM herald.outbox_retry r WHERE r.part = l.part AND r.state = 'pending') THEN
				RETURN QUERY
				SELECT 'h'::"char", l.part, l.fence, l.takeovers, count(*), 0,
					(array_agg(r.next_attempt_at ORDER BY r.qseq))[1] <= now(),
					NULL::uuid, NULL::bigint, NULL::xid8, r.tenant_id, r.channel, NULL::text, NULL::int,
					NULL::jsonb, NULL::jsonb, NULL::timestamptz, NULL::text
				FROM herald.outbox_retry r WHERE r.part = l.part AND r.state = 'pending'
				GROUP BY r.tenant_id, r.channel;
			END IF;
			RETURN;
		END IF;

		-- Nothing to dispatch: the range is done; give the lease back.
		UPDATE herald.outbox_partition p SET lo = p.hi, hi = NULL, pos_xid = '0', pos_seq = 0,
			open = false, takeovers = 0, owner = NULL, expires_at = NULL
		WHERE p.part = l.part
		RETURNING p.* INTO l;
		IF l.state = 'retiring' THEN
			PERFORM herald.outbox_retire(l.part);
		END IF;
		IF p_part >= 0 OR tries >= p_tries THEN
			RETURN;
		END IF;
	END LOOP;
END
$fn$;

CREATE FUNCTION herald.outbox_complete(p_part int, p_owner text, p_fence bigint, p_range_done boolean,
	p_last_xid xid8, p_last_seq bigint, p_records int,
	p_seq bigint[], p_xid xid8[], p_state text[], p_attempt int[], p_delay_us bigint[], p_err text[],
	p_qseq bigint[], p_qstate text[], p_qattempt int[], p_qdelay_us bigint[], p_qerr text[])
RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE
	l herald.outbox_partition;
BEGIN
	SELECT * INTO l FROM herald.outbox_partition p
	WHERE p.part = p_part AND p.owner = p_owner AND p.fence = p_fence AND p.open FOR UPDATE;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	IF p_records > 0 THEN
		INSERT INTO herald.outbox_batch (part, fence, lo, hi, from_xid, from_seq, to_xid, to_seq, records)
		VALUES (p_part, p_fence, l.lo, l.hi, l.pos_xid, l.pos_seq, coalesce(p_last_xid, l.pos_xid), coalesce(p_last_seq, l.pos_seq), p_records);
	END IF;
	UPDATE herald.outbox_partition p SET
		lo = CASE WHEN p_range_done THEN p.hi ELSE p.lo END,
		hi = CASE WHEN p_range_done THEN NULL ELSE p.hi END,
		pos_xid = CASE WHEN p_range_done THEN '0' ELSE coalesce(p_last_xid, p.pos_xid) END,
		pos_seq = CASE WHEN p_range_done THEN 0 ELSE coalesce(p_last_seq, p.pos_seq) END,
		open = false, takeovers = 0, owner = NULL, expires_at = NULL,
		done_at = now(), batches = p.batches + 1
	WHERE p.part = p_part;
	IF cardinality(p_seq) > 0 THEN
		INSERT INTO herald.outbox_retry (id, seq, xid, rec_part, part, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind,
			state, attempt, next_attempt_at, last_error, dead_lettered_at)
		SELECT o.id, o.seq, o.xid, o.part, o.part, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness, o.occurred_at, o.kind,
			x.state, x.attempt, now() + x.delay * interval '1 microsecond', x.err,
			CASE WHEN x.state = 'dead_letter' THEN now() END
		FROM unnest(p_seq, p_xid, p_state, p_attempt, p_delay_us, p_err) WITH ORDINALITY AS x(seq, xid, state, attempt, delay, err, ord)
		JOIN herald.outbox o ON o.part = p_part AND o.xid = x.xid AND o.seq = x.seq
		ORDER BY x.ord;
	END IF;
	IF cardinality(p_qseq) > 0 THEN
		UPDATE herald.outbox_retry r SET state = x.state, attempt = x.attempt,
			next_attempt_at = CASE WHEN x.state = 'pending' THEN now() + x.delay * interval '1 microsecond' ELSE r.next_attempt_at END,
			last_error = coalesce(x.err, r.last_error),
			dispatched_at = CASE WHEN x.state = 'dispatched' THEN now() END,
			dead_lettered_at = CASE WHEN x.state = 'dead_letter' THEN now() END
		FROM unnest(p_qseq, p_qstate, p_qattempt, p_qdelay_us, p_qerr) AS x(qseq, state, attempt, delay, err)
		WHERE r.qseq = x.qseq AND r.part = p_part AND r.state = 'pending';
	END IF;
	RETURN true;
END
$fn$;

CREATE VIEW herald.outbox_records AS
SELECT r.id, r.seq, r.part, r.tenant_id, r.channel, r.type, r.schema_version, r.payload, r.freshness,
	r.occurred_at, r.kind, r.state, r.attempt, r.next_attempt_at,
	NULL::text AS lease_owner, NULL::timestamptz AS lease_expires_at, NULL::bigint AS fence,
	r.last_error, r.dispatched_at, r.dead_lettered_at, r.qseq
FROM herald.outbox_retry r
UNION ALL
SELECT o.id, o.seq, o.part, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness,
	o.occurred_at, o.kind, d.state, 0, o.occurred_at,
	CASE WHEN d.state = 'processing' THEN p.owner END, CASE WHEN d.state = 'processing' THEN p.expires_at END,
	CASE WHEN d.state = 'processing' THEN p.fence END,
	NULL::text,
	CASE WHEN d.state = 'dispatched' THEN coalesce((SELECT b.done_at FROM herald.outbox_batch b
		WHERE b.part = o.part AND pg_visible_in_snapshot(o.xid, b.hi) AND NOT pg_visible_in_snapshot(o.xid, b.lo)
			AND (o.xid, o.seq) > (b.from_xid, b.from_seq) AND (o.xid, o.seq) <= (b.to_xid, b.to_seq)
		ORDER BY b.done_at LIMIT 1), p.done_at, o.occurred_at) END,
	NULL::timestamptz, NULL::bigint
FROM herald.outbox o
JOIN herald.outbox_partition p ON p.part = o.part
CROSS JOIN LATERAL (SELECT CASE
	WHEN pg_visible_in_snapshot(o.xid, p.lo)
		OR (p.hi IS NOT NULL AND pg_visible_in_snapshot(o.xid, p.hi) AND (o.xid, o.seq) <= (p.pos_xid, p.pos_seq))
		THEN 'dispatched'
	WHEN p.open AND p.expires_at > now() AND pg_visible_in_snapshot(o.xid, p.hi) THEN 'processing'
	ELSE 'pending' END AS state) d
WHERE NOT EXISTS (SELECT 1 FROM herald.outbox_retry q WHERE q.seq = o.seq);
