-- migration 10 reversed: herald.outbox_partition_of is a SQL function
-- again, with the same partition base and count (and so the same mapping),
-- in the words migration 3 or SetPartitions used.

DO $mig$
DECLARE
	src  text := (SELECT prosrc FROM pg_proc WHERE oid = 'herald.outbox_partition_of(text, text)'::regprocedure);
	base int  := coalesce((regexp_match(src, '(?:SELECT|RETURN) (\d+) \+'))[1]::int, 0);
	n    int  := (regexp_match(src, '% (\d+)\)::int'))[1]::int;
BEGIN
	IF n IS NULL THEN
		RAISE EXCEPTION 'migration 10 reversed: herald.outbox_partition_of is not one Herald wrote: %', src;
	END IF;
	EXECUTE format($f$CREATE OR REPLACE FUNCTION herald.outbox_partition_of(tenant_id text, channel text) RETURNS int
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $fn$ SELECT %s((hashtextextended(tenant_id || '/' || channel, 0) & 9223372036854775807) %% %s)::int $fn$$f$,
		CASE base WHEN 0 THEN '' ELSE base || ' + ' END, n);
END
$mig$;

-- The batch log's handler references herald.outbox_handler again (the
-- trigger kept it so: every batch's handler exists).
DROP TRIGGER outbox_handler_gone ON herald.outbox_handler;
DROP FUNCTION herald.outbox_handler_gone();
ALTER TABLE herald.outbox_batch ADD CONSTRAINT outbox_batch_handler_fkey
	FOREIGN KEY (handler) REFERENCES herald.outbox_handler (name) ON DELETE CASCADE;
