-- migration 5 reversed: one consumer again, the built-in handler realtime.
--
-- Only once realtime is the sole handler (the check refuses otherwise):
-- its partition row, retry queue and batch log keep every position, so
-- nothing moves, nothing is delivered again or skipped. The handler and
-- reader tables go; the tables, indexes and view are migration 4's.

DROP VIEW outbox_record;

CREATE TABLE outbox_partition_v4 (
	part       INTEGER PRIMARY KEY CONSTRAINT outbox_partition_only_zero CHECK (part = 0),
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
	CONSTRAINT outbox_partition_lease CHECK ((owner IS NULL) = (expires_at IS NULL)),
	CONSTRAINT outbox_partition_claim CHECK (claim_to IS NULL OR claim_to >= pos)
);
INSERT INTO outbox_partition_v4 (part, owner, expires_at, fence, pos, claim_to, done_at, takeovers, tk_to, claim_qto, tk_qto)
SELECT part, owner, expires_at, fence, pos, claim_to, done_at, takeovers, tk_to, claim_qto, tk_qto
FROM outbox_partition WHERE handler = 'realtime';
DROP TABLE outbox_partition;
ALTER TABLE outbox_partition_v4 RENAME TO outbox_partition;

CREATE TABLE outbox_batch_v4 (
	part     INTEGER NOT NULL,
	to_seq   INTEGER NOT NULL,
	from_seq INTEGER NOT NULL,
	fence    INTEGER NOT NULL,
	done_at  INTEGER NOT NULL,
	PRIMARY KEY (part, to_seq),
	CONSTRAINT outbox_batch_range CHECK (from_seq <= to_seq)
) WITHOUT ROWID;
INSERT INTO outbox_batch_v4 (part, to_seq, from_seq, fence, done_at)
SELECT part, to_seq, from_seq, fence, done_at FROM outbox_batch WHERE handler = 'realtime';
DROP TABLE outbox_batch;
ALTER TABLE outbox_batch_v4 RENAME TO outbox_batch;
CREATE INDEX outbox_batch_done_idx ON outbox_batch (part, done_at);

DROP INDEX outbox_retry_record_idx;
DROP INDEX outbox_retry_pending_idx;
DROP INDEX outbox_retry_dead_letter_idx;
DROP INDEX outbox_retry_dispatched_idx;
DELETE FROM outbox_retry WHERE handler <> 'realtime';
ALTER TABLE outbox_retry DROP COLUMN handler;
CREATE UNIQUE INDEX outbox_retry_record_idx ON outbox_retry (rec_seq);
CREATE INDEX outbox_retry_pending_idx ON outbox_retry (tenant_id, channel, qseq) WHERE state = 'pending';
CREATE INDEX outbox_retry_dead_letter_idx ON outbox_retry (dead_lettered_at) WHERE state = 'dead_letter';
CREATE INDEX outbox_retry_dispatched_idx ON outbox_retry (dispatched_at) WHERE state = 'dispatched';

ALTER TABLE outbox_replay DROP COLUMN handler;
DROP TABLE outbox_reader;
DROP TABLE outbox_handler;

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
