-- migration 5: handlers. The outbox is one log; a handler is one consumer
-- of it (docs/handlers.md). Each handler has its own partition row
-- (lease, fence and position), retry queue rows, dead letters and batch
-- log, so one that is slow, failing, paused or disabled never holds back
-- another. The built-in handler realtime keeps the position, queued
-- records and batches of before: nothing is delivered again or skipped.
--
--   - outbox_handler lists the handlers: type, state (active, paused,
--     disabled: only an active handler claims), where a handler added
--     later started (retained: every record still in the outbox; new:
--     only records committed after it was added), and since when its
--     target fails.
--   - outbox_reader lists the running Workers of each handler (a
--     heartbeat), with the (type, version) pairs each reads.
--   - outbox_partition and outbox_batch are rebuilt with the handler
--     first in their keys; outbox_retry gains the handler column (a
--     record has at most one queue row per handler); outbox_replay
--     records it. A handler's rows are deleted with it (DropHandler).
--   - The outbox_record view gains a handler column and shows each record
--     once per handler.

CREATE TABLE outbox_handler (
	name          TEXT    PRIMARY KEY
		CONSTRAINT outbox_handler_name CHECK (length(name) BETWEEN 1 AND 64 AND name NOT GLOB '*[^a-z0-9_-]*'),
	type          TEXT    NOT NULL,
	state         TEXT    NOT NULL DEFAULT 'active'
		CONSTRAINT outbox_handler_state CHECK (state IN ('active', 'paused', 'disabled')),
	start_from    TEXT    NOT NULL DEFAULT 'retained'
		CONSTRAINT outbox_handler_start CHECK (start_from IN ('retained', 'new')),
	created_at    INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
	state_reason  TEXT,
	state_at      INTEGER,
	failing_since INTEGER,
	last_error    TEXT
) WITHOUT ROWID;
INSERT INTO outbox_handler (name, type) VALUES ('realtime', 'realtime');

CREATE TABLE outbox_reader (
	handler    TEXT    NOT NULL,
	owner      TEXT    NOT NULL,
	reads      TEXT    NOT NULL DEFAULT '[]' CONSTRAINT outbox_reader_reads CHECK (json_valid(reads)),
	started_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
	seen_at    INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
	PRIMARY KEY (handler, owner)
) WITHOUT ROWID;

DROP VIEW outbox_record;

CREATE TABLE outbox_partition_v5 (
	handler    TEXT    NOT NULL,
	part       INTEGER NOT NULL CONSTRAINT outbox_partition_only_zero CHECK (part = 0),
	owner      TEXT,
	expires_at INTEGER,
	fence      INTEGER NOT NULL DEFAULT 0,
	pos        INTEGER NOT NULL DEFAULT 0,
	claim_to   INTEGER,
	done_at    INTEGER,
	takeovers  INTEGER NOT NULL DEFAULT 0
		CONSTRAINT outbox_partition_takeovers_non_negative CHECK (takeovers >= 0),
	tk_to      INTEGER NOT NULL DEFAULT 0,
	claim_qto  INTEGER NOT NULL DEFAULT 0,
	tk_qto     INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (handler, part),
	CONSTRAINT outbox_partition_lease CHECK ((owner IS NULL) = (expires_at IS NULL)),
	CONSTRAINT outbox_partition_claim CHECK (claim_to IS NULL OR claim_to >= pos)
);
INSERT INTO outbox_partition_v5 (handler, part, owner, expires_at, fence, pos, claim_to, done_at, takeovers, tk_to, claim_qto, tk_qto)
SELECT 'realtime', part, owner, expires_at, fence, pos, claim_to, done_at, takeovers, tk_to, claim_qto, tk_qto
FROM outbox_partition;
DROP TABLE outbox_partition;
ALTER TABLE outbox_partition_v5 RENAME TO outbox_partition;

CREATE TABLE outbox_batch_v5 (
	handler  TEXT    NOT NULL,
	part     INTEGER NOT NULL,
	to_seq   INTEGER NOT NULL,
	from_seq INTEGER NOT NULL,
	fence    INTEGER NOT NULL,
	done_at  INTEGER NOT NULL,
	PRIMARY KEY (handler, part, to_seq),
	CONSTRAINT outbox_batch_range CHECK (from_seq <= to_seq)
) WITHOUT ROWID;
INSERT INTO outbox_batch_v5 (handler, part, to_seq, from_seq, fence, done_at)
SELECT 'realtime', part, to_seq, from_seq, fence, done_at FROM outbox_batch;
DROP TABLE outbox_batch;
ALTER TABLE outbox_batch_v5 RENAME TO outbox_batch;
CREATE INDEX outbox_batch_done_idx ON outbox_batch (handler, part, done_at);

-- Every queue row of before is realtime's. (SQLite cannot drop a column
-- default; every insert names the handler.)
ALTER TABLE outbox_retry ADD COLUMN handler TEXT NOT NULL DEFAULT 'realtime';
DROP INDEX outbox_retry_record_idx;
CREATE UNIQUE INDEX outbox_retry_record_idx ON outbox_retry (handler, rec_seq);
DROP INDEX outbox_retry_pending_idx;
CREATE INDEX outbox_retry_pending_idx ON outbox_retry (handler, tenant_id, channel, qseq) WHERE state = 'pending';
DROP INDEX outbox_retry_dead_letter_idx;
CREATE INDEX outbox_retry_dead_letter_idx ON outbox_retry (handler, dead_lettered_at) WHERE state = 'dead_letter';
DROP INDEX outbox_retry_dispatched_idx;
CREATE INDEX outbox_retry_dispatched_idx ON outbox_retry (handler, dispatched_at) WHERE state = 'dispatched';

ALTER TABLE outbox_replay ADD COLUMN handler TEXT NOT NULL DEFAULT 'realtime';

-- Every record with its derived lifecycle for each handler, in the
-- columns of migration 2's outbox table (for Get, List, the admin
-- commands and operators' SQL).
CREATE VIEW outbox_record AS
SELECT handler, id, seq, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind, state,
	attempt, next_attempt_at,
	CASE state WHEN 'processing' THEN owner END AS lease_owner,
	CASE state WHEN 'processing' THEN expires_at END AS lease_expires_at,
	CASE state WHEN 'processing' THEN part_fence WHEN 'dispatched' THEN coalesce(batch_fence, 0) ELSE 0 END AS fence,
	last_error, dispatched_at, dead_lettered_at
FROM (
	SELECT p.handler, o.id, o.seq, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness,
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
	FROM outbox_partition p
	JOIN outbox o
	LEFT JOIN outbox_retry q ON q.handler = p.handler AND q.rec_seq = o.seq
	LEFT JOIN outbox_batch b ON q.qseq IS NULL AND o.seq <= p.pos AND b.handler = p.handler AND b.part = 0
		AND b.to_seq = (SELECT min(c.to_seq) FROM outbox_batch c WHERE c.handler = p.handler AND c.part = 0 AND c.to_seq >= o.seq)
	WHERE p.part = 0
);
