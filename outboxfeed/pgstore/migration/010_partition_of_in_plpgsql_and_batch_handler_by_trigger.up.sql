-- migration 10: herald.outbox_partition_of, which computes the generated
-- column part of every staged record, becomes a PL/pgSQL function with the
-- same expression. As a SQL function it was inlined into the generated
-- column's expression each time an INSERT started, parsing and analysing
-- its body again: about a third of a producer's backend CPU per
-- single-record transaction (docs/performance.md). PL/pgSQL keeps the
-- compiled expression for the session. The mapping does not change: the
-- partition base and count are read from the current function (migration
-- 3 or SetPartitions wrote them, as SQL or, from a newer binary, as
-- PL/pgSQL), and the new function is checked against the old one on
-- 4,096 channel names before the migration commits. A partition count
-- change in progress is unaffected. The batch log's foreign key to the
-- handlers gives way to a trigger (below).

DO $mig$
DECLARE
	src  text := (SELECT prosrc FROM pg_proc WHERE oid = 'herald.outbox_partition_of(text, text)'::regprocedure);
	base int  := coalesce((regexp_match(src, '(?:SELECT|RETURN) (\d+) \+'))[1]::int, 0);
	n    int  := (regexp_match(src, '% (\d+)\)::int'))[1]::int;
	differ int;
BEGIN
	IF n IS NULL THEN
		RAISE EXCEPTION 'migration 10: herald.outbox_partition_of is not one Herald wrote: %', src;
	END IF;
	CREATE TEMP TABLE outbox_partition_of_before ON COMMIT DROP AS
		SELECT 'tenant-' || (g % 7) AS tenant_id, 'channel/' || md5(g::text) || repeat('é', g % 5) AS channel,
			herald.outbox_partition_of('tenant-' || (g % 7), 'channel/' || md5(g::text) || repeat('é', g % 5)) AS part
		FROM generate_series(1, 4096) g;
	EXECUTE format($f$CREATE OR REPLACE FUNCTION herald.outbox_partition_of(tenant_id text, channel text) RETURNS int
	LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
	AS $fn$ BEGIN RETURN %s + ((hashtextextended(tenant_id || '/' || channel, 0) & 9223372036854775807) %% %s)::int; END $fn$$f$, base, n);
	SELECT count(*) INTO differ FROM outbox_partition_of_before b
		WHERE b.part <> herald.outbox_partition_of(b.tenant_id, b.channel);
	IF differ > 0 THEN
		RAISE EXCEPTION 'migration 10: the new herald.outbox_partition_of maps % of 4096 channels elsewhere', differ;
	END IF;
END
$mig$;

-- The batch log's handler loses its foreign key: checking it took a FOR
-- KEY SHARE lock on the handler's row for every batch a Worker logged
-- (about a fifth of the statement that completes a batch and claims the
-- next range). What it guaranteed stays:
--   - no batch names a handler that does not exist: both statements that
--     log a batch (herald.outbox_complete, and the Worker's advance) do
--     so only while they hold the lock on the handler's partition row,
--     which still references the handler (ON DELETE CASCADE);
--   - a handler's batches go with it: the trigger below deletes them,
--     after the cascade has deleted (and so waited for the Workers
--     holding) its partition rows; triggers fire in name order and the
--     cascade's are named RI_ConstraintTrigger_….
ALTER TABLE herald.outbox_batch DROP CONSTRAINT outbox_batch_handler_fkey;

CREATE FUNCTION herald.outbox_handler_gone() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	DELETE FROM herald.outbox_batch b WHERE b.handler = OLD.name;
	RETURN NULL;
END
$fn$;
CREATE TRIGGER outbox_handler_gone AFTER DELETE ON herald.outbox_handler
	FOR EACH ROW EXECUTE FUNCTION herald.outbox_handler_gone();
