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
-- herald:rest-from 003_outbox_partition_batches.up.sql
