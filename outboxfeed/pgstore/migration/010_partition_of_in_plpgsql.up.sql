-- migration 10: herald.outbox_partition_of, which computes the generated
-- column part of every staged record, becomes a PL/pgSQL function with the
-- same expression. As a SQL function it was inlined into the generated
-- column's expression each time an INSERT started, parsing and analysing
-- its body again: about a third of a producer's backend CPU per
-- single-record transaction (docs/performance.md). PL/pgSQL keeps the
-- compiled expression for the session. The mapping does not change: the
-- partition base and count are read from the current function (migration
-- 3 or SetPartitions wrote them, as SQL or, from a newer binary, as
-- PL/pgSQL), and the new function is checked against
-- the old one on 4,096 channel names before the migration commits. A
-- partition count change in progress is unaffected.

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
