-- migration 3 replaces the per-record lifecycle columns with one
-- partition position, a retry queue and a log of completed batches
-- (see the top of this file), and converts a migration-2 database so that
-- pending and processing records are delivered exactly once, dispatched
-- records never again, and dead letters stay dead letters:
--
--   - pos becomes the seq before the first pending or processing record
--     (the last seq allocated when there is none);
--   - dead letters, dispatched records past pos, and the pending or
--     processing records of every channel that has one with a failed
--     attempt (so retries keep their attempts, backoff and channel order)
--     are copied into the retry queue with their states, in seq order;
--     the claim skips records that have a queue row;
--   - the dispatched records at or below pos are logged as one batch done
--     at their latest dispatched_at (their Dispatched.At from then on);
--   - the partition's fence starts at the highest record fence, so fences
--     keep growing;
--   - the outbox table is rebuilt with the producers' columns only,
--     keeping its AUTOINCREMENT counter.

CREATE TABLE outbox_partition (
	part       INTEGER PRIMARY KEY CONSTRAINT outbox_partition_only_zero CHECK (part = 0),
	owner      TEXT,
	expires_at INTEGER,
	fence      INTEGER NOT NULL DEFAULT 0,
	pos        INTEGER NOT NULL DEFAULT 0,
	claim_to   INTEGER,
	done_at    INTEGER,
	takeovers  INTEGER NOT NULL DEFAULT 0
		CONSTRAINT outbox_partition_takeovers_non_negative CHECK (takeovers >= 0),
	CONSTRAINT outbox_partition_lease CHECK ((owner IS NULL) = (expires_at IS NULL)),
	CONSTRAINT outbox_partition_claim CHECK (claim_to IS NULL OR claim_to >= pos)
);

CREATE TABLE outbox_retry (
	qseq             INTEGER PRIMARY KEY AUTOINCREMENT,
	rec_seq          INTEGER NOT NULL,
	id               TEXT    NOT NULL,
	tenant_id        TEXT    NOT NULL,
	channel          TEXT    NOT NULL,
	type             TEXT    NOT NULL,
	schema_version   INTEGER NOT NULL,
	payload          TEXT    NOT NULL,
	freshness        TEXT    NOT NULL,
	occurred_at      INTEGER NOT NULL,
	kind             TEXT    NOT NULL,
	state            TEXT    NOT NULL DEFAULT 'pending'
		CONSTRAINT outbox_retry_state CHECK (state IN ('pending', 'dispatched', 'dead_letter')),
	attempt          INTEGER NOT NULL DEFAULT 0
		CONSTRAINT outbox_retry_attempt_non_negative CHECK (attempt >= 0),
	next_attempt_at  INTEGER NOT NULL,
	last_error       TEXT,
	dispatched_at    INTEGER,
	dead_lettered_at INTEGER,
	CONSTRAINT outbox_retry_pending_columns CHECK (state <> 'pending' OR (
		dispatched_at IS NULL AND dead_lettered_at IS NULL)),
	CONSTRAINT outbox_retry_dispatched_columns CHECK (state <> 'dispatched' OR (
		dispatched_at IS NOT NULL AND dead_lettered_at IS NULL)),
	CONSTRAINT outbox_retry_dead_letter_columns CHECK (state <> 'dead_letter' OR (
		dead_lettered_at IS NOT NULL AND last_error IS NOT NULL AND dispatched_at IS NULL))
);
CREATE UNIQUE INDEX outbox_retry_record_idx ON outbox_retry (rec_seq);
CREATE INDEX outbox_retry_pending_idx ON outbox_retry (tenant_id, channel, qseq) WHERE state = 'pending';
CREATE INDEX outbox_retry_dead_letter_idx ON outbox_retry (dead_lettered_at) WHERE state = 'dead_letter';
CREATE INDEX outbox_retry_dispatched_idx ON outbox_retry (dispatched_at) WHERE state = 'dispatched';

CREATE TABLE outbox_batch (
	part     INTEGER NOT NULL,
	to_seq   INTEGER NOT NULL,
	from_seq INTEGER NOT NULL,
	fence    INTEGER NOT NULL,
	done_at  INTEGER NOT NULL,
	PRIMARY KEY (part, to_seq),
	CONSTRAINT outbox_batch_range CHECK (from_seq <= to_seq)
) WITHOUT ROWID;
CREATE INDEX outbox_batch_done_idx ON outbox_batch (part, done_at);

INSERT INTO outbox_partition (part, fence, pos)
SELECT 0, coalesce((SELECT max(fence) FROM outbox), 0),
	coalesce((SELECT min(seq) - 1 FROM outbox WHERE state IN ('pending', 'processing')),
	         (SELECT seq FROM sqlite_sequence WHERE name = 'outbox'), 0);

INSERT INTO outbox_retry (rec_seq, id, tenant_id, channel, type, schema_version, payload, freshness,
	occurred_at, kind, state, attempt, next_attempt_at, last_error, dispatched_at, dead_lettered_at)
SELECT o.seq, o.id, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness,
	o.occurred_at, o.kind,
	CASE o.state WHEN 'processing' THEN 'pending' ELSE o.state END, o.attempt,
	CASE o.state WHEN 'processing' THEN CAST(unixepoch('subsec') * 1000000 AS INTEGER) ELSE o.next_attempt_at END, o.last_error,
	CASE o.state WHEN 'dispatched' THEN o.dispatched_at END,
	CASE o.state WHEN 'dead_letter' THEN o.dead_lettered_at END
FROM outbox o
WHERE o.state = 'dead_letter'
   OR (o.state = 'dispatched' AND o.seq > (SELECT pos FROM outbox_partition WHERE part = 0))
   OR (o.state IN ('pending', 'processing') AND EXISTS (SELECT 1 FROM outbox r
	WHERE r.tenant_id = o.tenant_id AND r.channel = o.channel AND r.state IN ('pending', 'processing')
	  AND (r.attempt > 0 OR r.last_error IS NOT NULL)))
ORDER BY o.seq;

INSERT INTO outbox_batch (part, to_seq, from_seq, fence, done_at)
SELECT 0, p.pos, min(o.seq), 0, max(o.dispatched_at)
FROM outbox o, outbox_partition p
WHERE p.part = 0 AND o.state = 'dispatched' AND o.seq <= p.pos
GROUP BY p.pos;

UPDATE outbox_partition SET done_at = (SELECT max(done_at) FROM outbox_batch WHERE part = 0);

CREATE TABLE outbox_v3 (
	seq              INTEGER PRIMARY KEY AUTOINCREMENT,
	id               TEXT    NOT NULL UNIQUE DEFAULT (lower(
		hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-' ||
		substr('89ab', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))))
		CONSTRAINT outbox_id_format CHECK (length(id) = 36),
	tenant_id        TEXT    NOT NULL,
	channel          TEXT    NOT NULL,
	type             TEXT    NOT NULL
		CONSTRAINT outbox_type_format CHECK (length(type) BETWEEN 1 AND 128 AND type NOT GLOB '*[^a-z0-9_.-]*'),
	schema_version   INTEGER NOT NULL
		CONSTRAINT outbox_schema_version_positive CHECK (schema_version >= 1),
	payload          TEXT    NOT NULL
		CONSTRAINT outbox_payload_json CHECK (json_valid(payload)),
	freshness        TEXT    NOT NULL DEFAULT '{"mode":"immediate"}'
		CONSTRAINT outbox_freshness_mode CHECK (json_valid(freshness) AND (
			json_extract(freshness, '$.mode') = 'immediate'
			OR (json_extract(freshness, '$.mode') = 'advisory'
			    AND coalesce(json_extract(freshness, '$.authority'), '') <> ''))),
	occurred_at      INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
	kind             TEXT    NOT NULL DEFAULT 'notification'
		CONSTRAINT outbox_kind CHECK (kind IN ('notification', 'integration_event', 'journey_step_command', 'provider_side_effect'))
);
INSERT INTO outbox_v3 (seq, id, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind)
SELECT seq, id, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind
FROM outbox ORDER BY seq;
DELETE FROM sqlite_sequence WHERE name = 'outbox_v3';
INSERT INTO sqlite_sequence (name, seq) SELECT 'outbox_v3', seq FROM sqlite_sequence WHERE name = 'outbox';
DROP TABLE outbox;
ALTER TABLE outbox_v3 RENAME TO outbox;

-- Every record with its derived lifecycle, in the columns of migration 2's
-- outbox table (for Get, List, the admin commands and operators' SQL).
CREATE VIEW outbox_record AS
SELECT id, seq, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind, state,
	attempt, next_attempt_at,
	CASE state WHEN 'processing' THEN owner END AS lease_owner,
	CASE state WHEN 'processing' THEN expires_at END AS lease_expires_at,
	CASE state WHEN 'processing' THEN part_fence WHEN 'dispatched' THEN coalesce(batch_fence, 0) ELSE 0 END AS fence,
	last_error, dispatched_at, dead_lettered_at
FROM (
	SELECT o.id, o.seq, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness,
		o.occurred_at, o.kind,
		CASE
			WHEN q.qseq IS NOT NULL THEN q.state
			WHEN o.seq <= p.pos THEN 'dispatched'
			WHEN o.seq <= p.claim_to AND p.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) THEN 'processing'
			ELSE 'pending'
		END AS state,
		coalesce(q.attempt, 0) AS attempt,
		coalesce(q.next_attempt_at, o.occurred_at) AS next_attempt_at,
		p.owner, p.expires_at, p.fence AS part_fence, b.fence AS batch_fence,
		q.last_error,
		CASE WHEN q.qseq IS NOT NULL THEN q.dispatched_at
		     WHEN o.seq <= p.pos THEN coalesce(b.done_at, p.done_at, o.occurred_at) END AS dispatched_at,
		q.dead_lettered_at
	FROM outbox o
	JOIN outbox_partition p ON p.part = 0
	LEFT JOIN outbox_retry q ON q.rec_seq = o.seq
	LEFT JOIN outbox_batch b ON q.qseq IS NULL AND o.seq <= p.pos AND b.part = 0
		AND b.to_seq = (SELECT min(c.to_seq) FROM outbox_batch c WHERE c.part = 0 AND c.to_seq >= o.seq)
);
