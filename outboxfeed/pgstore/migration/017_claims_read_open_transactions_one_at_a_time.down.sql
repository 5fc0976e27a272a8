-- migration 17 reversed: the claim functions read the open transactions'
-- records with the one condition xid = ANY (list) again, as migration 11
-- wrote them.

DO $mig$
DECLARE
	fn regprocedure;
	was text := $was$	SELECT o.* FROM pg_snapshot_xip(l.lo) AS x(xid) CROSS JOIN LATERAL (SELECT * FROM herald.outbox o WHERE o.part = l.part
		AND o.xid = x.xid AND o.seq > l.pos_seq AND pg_visible_in_snapshot(o.xid, l.hi) OFFSET 0) o$was$;
	becomes text := $now$	SELECT * FROM herald.outbox o WHERE o.part = l.part AND o.xid = ANY (ARRAY(SELECT pg_snapshot_xip(l.lo)))
		AND o.seq > l.pos_seq AND pg_visible_in_snapshot(o.xid, l.hi)$now$;
BEGIN
	FOREACH fn IN ARRAY ARRAY['herald.outbox_claim(text, int, text, interval, int, int, int)',
		'herald.outbox_range_runs(text, int, int)']::regprocedure[] LOOP
		IF position(was IN (SELECT prosrc FROM pg_proc WHERE oid = fn)) = 0 THEN
			RAISE EXCEPTION 'migration 17 reversed: % is not the one migration 17 wrote', fn;
		END IF;
		EXECUTE replace(pg_get_functiondef(fn), was, becomes);
	END LOOP;
END
$mig$;
