-- The claim functions read the records of the transactions open at the
-- start of a range one xid at a time: each is a lookup of the (part,
-- xid, seq) index in a lateral subquery that OFFSET 0 keeps the planner
-- from flattening into a join over the whole partition (what migration 11
-- took the lateral join of migration 8 away for). As the one condition
-- xid = ANY (list) of migration 11, the generic plan of a segment without
-- statistics took the list as a filter and read every record of the
-- partition retained in that segment, on every claim; the first 1,001
-- records ever staged stay in herald.outbox_default. The statements the
-- Worker sends itself read them the same way (pgstore's readOpenByXid).
-- The two functions that read a range change in that read only: each is
-- rewritten from its own definition with the read replaced.

DO $mig$
DECLARE
	fn regprocedure;
	was text := $was$	SELECT * FROM herald.outbox o WHERE o.part = l.part AND o.xid = ANY (ARRAY(SELECT pg_snapshot_xip(l.lo)))
		AND o.seq > l.pos_seq AND pg_visible_in_snapshot(o.xid, l.hi)$was$;
	becomes text := $now$	SELECT o.* FROM pg_snapshot_xip(l.lo) AS x(xid) CROSS JOIN LATERAL (SELECT * FROM herald.outbox o WHERE o.part = l.part
		AND o.xid = x.xid AND o.seq > l.pos_seq AND pg_visible_in_snapshot(o.xid, l.hi) OFFSET 0) o$now$;
BEGIN
	FOREACH fn IN ARRAY ARRAY['herald.outbox_claim(text, int, text, interval, int, int, int)',
		'herald.outbox_range_runs(text, int, int)']::regprocedure[] LOOP
		IF position(was IN (SELECT prosrc FROM pg_proc WHERE oid = fn)) = 0 THEN
			RAISE EXCEPTION 'migration 17: % is not the one migration 11 wrote', fn;
		END IF;
		EXECUTE replace(pg_get_functiondef(fn), was, becomes);
	END LOOP;
END
$mig$;
