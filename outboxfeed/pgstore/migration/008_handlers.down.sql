-- migration 8 reversed: one consumer again, the built-in handler realtime.
--
-- Only once realtime is the sole handler (the check refuses otherwise):
-- its partition rows, retry queue and batch log keep every position, so
-- nothing moves, nothing is delivered again or skipped. The handler and
-- reader tables go; the functions, view and indexes are migration 7's.

DROP VIEW herald.outbox_records;
DROP FUNCTION herald.outbox_claim(text, int, text, interval, int, int, int);
DROP FUNCTION herald.outbox_keep(text, int, text, interval, bigint);
DROP FUNCTION herald.outbox_range_runs(text, int, int);
DROP FUNCTION herald.outbox_retire(text, int);
DROP FUNCTION herald.outbox_complete(text, int, text, bigint, boolean, boolean, bigint, int,
	bigint[], xid8[], text[], int[], bigint[], text[], bigint[], text[], int[], bigint[], text[]);

ALTER TABLE herald.outbox_partition DROP CONSTRAINT outbox_partition_pkey;
ALTER TABLE herald.outbox_partition DROP COLUMN handler;
ALTER TABLE herald.outbox_partition ADD PRIMARY KEY (part);

DROP INDEX herald.outbox_retry_pending_idx;
DROP INDEX herald.outbox_retry_seq_idx;
ALTER TABLE herald.outbox_retry DROP COLUMN handler;
CREATE INDEX outbox_retry_pending_idx ON herald.outbox_retry (part, tenant_id, channel, qseq) WHERE state = 'pending';
CREATE INDEX outbox_retry_seq_idx ON herald.outbox_retry (seq);

DROP INDEX herald.outbox_batch_done_idx;
ALTER TABLE herald.outbox_batch DROP COLUMN handler;
CREATE INDEX outbox_batch_done_idx ON herald.outbox_batch (part, done_at);

ALTER TABLE herald.outbox_replay DROP COLUMN handler;
DROP TABLE herald.outbox_reader;
DROP TABLE herald.outbox_handler;

CREATE FUNCTION herald.outbox_retire(p_part int) RETURNS void LANGUAGE plpgsql AS $fn$
-- herald:rest-from 006_ranges_in_staging_order.up.sql

CREATE FUNCTION herald.outbox_claim(p_part int, p_owner text, p_lease interval, p_limit int, p_tries int, p_range_limit int)
-- herald:rest-from 006_ranges_in_staging_order.up.sql

CREATE FUNCTION herald.outbox_keep(p_part int, p_owner text, p_lease interval, p_fence bigint)
-- herald:rest-from 006_ranges_in_staging_order.up.sql

CREATE FUNCTION herald.outbox_range_runs(p_part int, p_max int)
-- herald:rest-from 006_ranges_in_staging_order.up.sql

CREATE FUNCTION herald.outbox_complete(p_part int, p_owner text, p_fence bigint, p_range_done boolean,
-- herald:rest-from 007_takeover_marks_in_the_queue_and_notify_off.up.sql

CREATE VIEW herald.outbox_records AS
-- herald:rest-from 006_ranges_in_staging_order.up.sql
