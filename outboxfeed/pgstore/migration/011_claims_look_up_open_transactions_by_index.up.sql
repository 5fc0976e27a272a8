-- A claim reads the records of the transactions still open at the start
-- of its range (pg_snapshot_xip(lo)) with those xids as a condition of
-- the (part, xid, seq) index. Migration 8 joined the xids laterally, and
-- a planner without fresh statistics (autovacuum off, or a table grown
-- since its last ANALYZE) flattened that into a join that read the whole
-- partition, every retained record of it, to find the few rows of those
-- transactions: tens of milliseconds per claim with a hundred thousand
-- records retained. The two functions that read a range change in that
-- read only: each is rewritten from its own definition with the read
-- replaced.

DO $mig$
DECLARE
	fn regprocedure;
	was text := $was$	SELECT o.* FROM pg_snapshot_xip(l.lo) AS x(xid)
		CROSS JOIN LATERAL (SELECT * FROM herald.outbox o WHERE o.part = l.part AND o.xid = x.xid
			AND o.seq > l.pos_seq AND pg_visible_in_snapshot(o.xid, l.hi)) o$was$;
	becomes text := $now$	SELECT * FROM herald.outbox o WHERE o.part = l.part AND o.xid = ANY (ARRAY(SELECT pg_snapshot_xip(l.lo)))
		AND o.seq > l.pos_seq AND pg_visible_in_snapshot(o.xid, l.hi)$now$;
BEGIN
	FOREACH fn IN ARRAY ARRAY['herald.outbox_claim(text, int, text, interval, int, int, int)',
		'herald.outbox_range_runs(text, int, int)']::regprocedure[] LOOP
		IF position(was IN (SELECT prosrc FROM pg_proc WHERE oid = fn)) = 0 THEN
			RAISE EXCEPTION 'migration 11: % is not the one migration 8 wrote', fn;
		END IF;
		EXECUTE replace(pg_get_functiondef(fn), was, becomes);
	END LOOP;
END
$mig$;
