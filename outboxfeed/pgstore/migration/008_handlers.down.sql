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
DECLARE
	l herald.outbox_partition;
	r herald.outbox_repartition;
BEGIN
	SELECT * INTO r FROM herald.outbox_repartition FOR UPDATE;
	IF r.wait_vxids IS NULL THEN
		UPDATE herald.outbox_repartition SET wait_vxids = herald.outbox_open_vxids() RETURNING * INTO r;
	END IF;
	IF r.retire_xmax IS NULL THEN
		IF EXISTS (SELECT 1 FROM pg_locks k WHERE k.locktype = 'virtualxid' AND k.virtualxid = ANY (r.wait_vxids)) THEN
			RETURN;
		END IF;
		UPDATE herald.outbox_repartition SET retire_xmax = pg_current_xact_id() RETURNING * INTO r;
	END IF;
	SELECT * INTO l FROM herald.outbox_partition p WHERE p.part = p_part FOR UPDATE;
	IF l.state <> 'retiring' OR l.hi IS NOT NULL OR pg_snapshot_xmin(l.lo) < r.retire_xmax THEN
		RETURN;
	END IF;
	UPDATE herald.outbox_retry q SET part = herald.outbox_partition_of(q.tenant_id, q.channel)
	WHERE q.part = p_part AND q.state = 'pending';
	UPDATE herald.outbox_partition p SET state = 'retired' WHERE p.part = p_part;
END
$fn$;

CREATE FUNCTION herald.outbox_claim(p_part int, p_owner text, p_lease interval, p_limit int, p_tries int, p_range_limit int)
RETURNS TABLE (r_kind "char", r_part int, r_fence bigint, r_takeovers int, r_qseq bigint, r_attempt int, r_due boolean,
	r_id uuid, r_seq bigint, r_xid xid8, r_tenant text, r_channel text, r_type text, r_version int,
	r_payload jsonb, r_freshness jsonb, r_occurred timestamptz, r_kind2 text, r_tk boolean, r_tkq bigint)
-- The range is read in index order: a bitmap scan would read and sort it.
LANGUAGE plpgsql SET enable_bitmapscan = off SET enable_seqscan = off AS $fn$
DECLARE
	l herald.outbox_partition;
	n int;
	found_q int;
	tries int := 0;
	tried int[] := '{}';
BEGIN
	-- The last retiring partition retired (by this or another claim):
	-- the waiting ones take over.
	IF EXISTS (SELECT 1 FROM herald.outbox_partition p WHERE p.state = 'waiting')
		AND NOT EXISTS (SELECT 1 FROM herald.outbox_partition p WHERE p.state = 'retiring') THEN
		UPDATE herald.outbox_partition p SET state = 'active' WHERE p.state = 'waiting';
	END IF;
	LOOP
		tries := tries + 1;
		-- Lock the row first, then take the snapshot in a statement of its
		-- own: a snapshot taken before waiting for another claim's update of
		-- the row could be older than the lo that claim wrote.
		IF p_part >= 0 THEN
			SELECT * INTO l FROM herald.outbox_partition p
			WHERE p.part = p_part AND p.state IN ('active', 'retiring')
				AND (p.owner IS NULL OR p.owner = p_owner OR p.expires_at < clock_timestamp())
			FOR UPDATE;
		ELSE
			-- Only a partition with work is leased: one that has a range open
			-- (a takeover, or the rest of a range), is retiring, or has a
			-- record committed past its position or a retry due. An idle
			-- partition costs a few index probes and no write.
			SELECT * INTO l FROM herald.outbox_partition p
			WHERE p.state IN ('active', 'retiring') AND (p.owner IS NULL OR p.expires_at < clock_timestamp())
				AND p.part <> ALL (tried)
				AND (p.open OR p.hi IS NOT NULL OR p.state = 'retiring'
					OR EXISTS (SELECT 1 FROM herald.outbox o WHERE o.part = p.part AND (o.xid, o.seq) >= (pg_snapshot_xmax(p.lo), 0))
					OR EXISTS (SELECT 1 FROM pg_snapshot_xip(p.lo) x(xid)
						CROSS JOIN LATERAL (SELECT 1 FROM herald.outbox o WHERE o.part = p.part AND o.xid = x.xid LIMIT 1) o)
					OR EXISTS (SELECT 1 FROM herald.outbox_retry r WHERE r.part = p.part AND r.state = 'pending' AND r.next_attempt_at <= now()))
			ORDER BY p.claimed_at NULLS FIRST, p.part LIMIT 1 FOR UPDATE SKIP LOCKED;
		END IF;
		IF NOT FOUND THEN
			RETURN;
		END IF;
		tried := tried || l.part;
		UPDATE herald.outbox_partition p SET owner = p_owner, expires_at = clock_timestamp() + p_lease,
			fence = p.fence + 1, takeovers = CASE WHEN p.open THEN p.takeovers + 1 ELSE 0 END, open = true,
			-- Taken over from a holder that never completed: it may have
			-- published any of the rest of the range.
			tk_range = p.tk_range OR p.open,
			tk_qseq = CASE WHEN p.open THEN greatest(p.tk_qseq, p.claim_qto) ELSE p.tk_qseq END, claim_qto = 0,
			hi = coalesce(p.hi, pg_current_snapshot()), claimed_at = clock_timestamp()
		WHERE p.part = l.part
		RETURNING p.* INTO l;

		found_q := 0;
		IF EXISTS (SELECT 1 FROM herald.outbox_retry r WHERE r.part = l.part AND r.state = 'pending') THEN
			RETURN QUERY
			WITH heads AS (
				SELECT DISTINCT ON (r.tenant_id, r.channel) r.tenant_id, r.channel, r.qseq AS head, r.next_attempt_at <= now() AS due
				FROM herald.outbox_retry r WHERE r.part = l.part AND r.state = 'pending'
				ORDER BY r.tenant_id, r.channel, r.qseq),
			due AS (SELECT h.tenant_id, h.channel, h.head FROM heads h WHERE h.due ORDER BY h.head LIMIT p_limit),
			share AS (SELECT (p_limit + count(*) - 1) / greatest(count(*), 1) AS n FROM due)
			SELECT 'q'::"char", l.part, l.fence, l.takeovers, r.qseq, r.attempt, true,
				r.id, r.seq, NULL::xid8, r.tenant_id, r.channel, r.type, r.schema_version,
				r.payload, r.freshness, r.occurred_at, r.kind, l.tk_range, l.tk_qseq
			FROM due h CROSS JOIN share s JOIN LATERAL (
				SELECT * FROM herald.outbox_retry r WHERE r.part = l.part AND r.state = 'pending'
					AND r.tenant_id = h.tenant_id AND r.channel = h.channel ORDER BY r.qseq LIMIT greatest(s.n, 1)) r ON true
			ORDER BY h.head, r.qseq;
			GET DIAGNOSTICS found_q = ROW_COUNT;
			IF found_q > 0 THEN
				-- At least every row handed out (for a takeover's tk_qseq).
				UPDATE herald.outbox_partition p SET claim_qto = (SELECT max(r.qseq) FROM herald.outbox_retry r
					WHERE r.part = l.part AND r.state = 'pending')
				WHERE p.part = l.part;
			END IF;
		END IF;

		RETURN QUERY
		SELECT 'r'::"char", l.part, l.fence, l.takeovers, NULL::bigint, 0, true,
			o.id, o.seq, o.xid, o.tenant_id, o.channel, o.type, o.schema_version,
			o.payload, o.freshness, o.occurred_at, o.kind, l.tk_range, l.tk_qseq
		FROM (
	SELECT o.* FROM pg_snapshot_xip(l.lo) AS x(xid)
		CROSS JOIN LATERAL (SELECT * FROM herald.outbox o WHERE o.part = l.part AND o.xid = x.xid
			AND o.seq > l.pos_seq AND pg_visible_in_snapshot(o.xid, l.hi)) o
	UNION ALL
	SELECT * FROM herald.outbox o WHERE o.part = l.part
		AND o.xid >= pg_snapshot_xmax(l.lo) AND o.xid < pg_snapshot_xmax(l.hi)
		AND o.seq > l.pos_seq AND pg_visible_in_snapshot(o.xid, l.hi)) o
		LIMIT p_range_limit + 1;
		GET DIAGNOSTICS n = ROW_COUNT;

		IF n > 0 OR found_q > 0 THEN
			IF found_q > 0 OR n > 0 AND EXISTS (SELECT 1 FROM herald.outbox_retry r WHERE r.part = l.part AND r.state = 'pending') THEN
				RETURN QUERY
				SELECT 'h'::"char", l.part, l.fence, l.takeovers, count(*), 0,
					(array_agg(r.next_attempt_at ORDER BY r.qseq))[1] <= now(),
					NULL::uuid, NULL::bigint, NULL::xid8, r.tenant_id, r.channel, NULL::text, NULL::int,
					NULL::jsonb, NULL::jsonb, NULL::timestamptz, NULL::text, l.tk_range, l.tk_qseq
				FROM herald.outbox_retry r WHERE r.part = l.part AND r.state = 'pending'
				GROUP BY r.tenant_id, r.channel;
			END IF;
			RETURN;
		END IF;

		-- Nothing to dispatch: the range is done; give the lease back.
		UPDATE herald.outbox_partition p SET lo = p.hi, hi = NULL, pos_xid = '0', pos_seq = 0,
			open = false, takeovers = 0, tk_range = false, owner = NULL, expires_at = NULL
		WHERE p.part = l.part
		RETURNING p.* INTO l;
		IF l.state = 'retiring' THEN
			PERFORM herald.outbox_retire(l.part);
		END IF;
		IF p_part >= 0 OR tries >= p_tries THEN
			RETURN;
		END IF;
	END LOOP;
END
$fn$;

CREATE FUNCTION herald.outbox_keep(p_part int, p_owner text, p_lease interval, p_fence bigint)
RETURNS TABLE (r_fence bigint, r_tk boolean, r_tenant text, r_channel text)
LANGUAGE plpgsql AS $fn$
DECLARE
	l herald.outbox_partition;
BEGIN
	UPDATE herald.outbox_partition p SET owner = p_owner, expires_at = clock_timestamp() + p_lease,
		fence = p.fence + 1, takeovers = 0, open = true, claimed_at = clock_timestamp()
	WHERE p.part = p_part AND p.fence = p_fence AND p.owner IS NULL AND p.hi IS NOT NULL
		AND p.state IN ('active', 'retiring')
	RETURNING p.* INTO l;
	IF NOT FOUND THEN
		RETURN;
	END IF;
	RETURN QUERY SELECT l.fence, l.tk_range, NULL::text, NULL::text;
	RETURN QUERY SELECT DISTINCT ON (r.tenant_id, r.channel) l.fence, l.tk_range, r.tenant_id, r.channel
		FROM herald.outbox_retry r WHERE r.part = p_part AND r.state = 'pending'
		ORDER BY r.tenant_id, r.channel;
END
$fn$;

CREATE FUNCTION herald.outbox_range_runs(p_part int, p_max int)
RETURNS TABLE (r_xid xid8, r_from bigint, r_to bigint, r_n int)
LANGUAGE plpgsql SET enable_bitmapscan = off SET enable_seqscan = off AS $fn$
DECLARE
	l herald.outbox_partition;
BEGIN
	SELECT * INTO l FROM herald.outbox_partition p WHERE p.part = p_part AND p.hi IS NOT NULL;
	IF NOT FOUND THEN
		RETURN;
	END IF;
	RETURN QUERY
	WITH k AS (SELECT o.xid, o.seq FROM (
	SELECT o.* FROM pg_snapshot_xip(l.lo) AS x(xid)
		CROSS JOIN LATERAL (SELECT * FROM herald.outbox o WHERE o.part = l.part AND o.xid = x.xid
			AND o.seq > l.pos_seq AND pg_visible_in_snapshot(o.xid, l.hi)) o
	UNION ALL
	SELECT * FROM herald.outbox o WHERE o.part = l.part
		AND o.xid >= pg_snapshot_xmax(l.lo) AND o.xid < pg_snapshot_xmax(l.hi)
		AND o.seq > l.pos_seq AND pg_visible_in_snapshot(o.xid, l.hi)) o),
	s AS (SELECT k.xid, k.seq, CASE WHEN k.xid = lag(k.xid) OVER (ORDER BY k.seq) THEN 0 ELSE 1 END AS start FROM k),
	g AS (SELECT s.xid, s.seq, sum(s.start) OVER (ORDER BY s.seq) AS run FROM s)
	SELECT g.xid, min(g.seq), max(g.seq), count(*)::int FROM g GROUP BY g.run, g.xid ORDER BY min(g.seq) LIMIT p_max;
END
$fn$;

CREATE FUNCTION herald.outbox_complete(p_part int, p_owner text, p_fence bigint, p_range_done boolean,
	p_takeover boolean, p_last_seq bigint, p_records int,
	p_seq bigint[], p_xid xid8[], p_state text[], p_attempt int[], p_delay_us bigint[], p_err text[],
	p_qseq bigint[], p_qstate text[], p_qattempt int[], p_qdelay_us bigint[], p_qerr text[])
RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE
	l herald.outbox_partition;
BEGIN
	SELECT * INTO l FROM herald.outbox_partition p
	WHERE p.part = p_part AND p.owner = p_owner AND p.fence = p_fence AND p.open FOR UPDATE;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	IF p_records > 0 THEN
		INSERT INTO herald.outbox_batch (part, fence, lo, hi, from_xid, from_seq, to_xid, to_seq, records, by_seq)
		VALUES (p_part, p_fence, l.lo, l.hi, '0', l.pos_seq, '0', coalesce(p_last_seq, l.pos_seq), p_records, true);
	END IF;
	UPDATE herald.outbox_partition p SET
		lo = CASE WHEN p_range_done THEN p.hi ELSE p.lo END,
		hi = CASE WHEN p_range_done THEN NULL ELSE p.hi END,
		pos_seq = CASE WHEN p_range_done THEN 0 ELSE coalesce(p_last_seq, p.pos_seq) END,
		tk_range = CASE WHEN p_range_done THEN false ELSE p.tk_range END,
		open = false, takeovers = 0, owner = NULL, expires_at = NULL, claim_qto = 0,
		done_at = now(), batches = p.batches + 1
	WHERE p.part = p_part;
	IF cardinality(p_seq) > 0 THEN
		INSERT INTO herald.outbox_retry (id, seq, xid, rec_part, part, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind,
			state, attempt, next_attempt_at, last_error, dead_lettered_at)
		SELECT o.id, o.seq, o.xid, o.part, o.part, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness, o.occurred_at, o.kind,
			x.state, x.attempt, now() + x.delay * interval '1 microsecond', x.err,
			CASE WHEN x.state = 'dead_letter' THEN now() END
		FROM unnest(p_seq, p_xid, p_state, p_attempt, p_delay_us, p_err) WITH ORDINALITY AS x(seq, xid, state, attempt, delay, err, ord)
		JOIN herald.outbox o ON o.part = p_part AND o.xid = x.xid AND o.seq = x.seq
		ORDER BY x.ord;
		IF p_takeover THEN
			-- Records of a batch taken over may have been published by the
			-- holder that never completed: so they are when they leave the
			-- queue.
			UPDATE herald.outbox_partition p SET tk_qseq = greatest(p.tk_qseq,
				(SELECT max(r.qseq) FROM herald.outbox_retry r WHERE r.part = p_part))
			WHERE p.part = p_part;
		END IF;
	END IF;
	IF cardinality(p_qseq) > 0 THEN
		UPDATE herald.outbox_retry r SET state = x.state, attempt = x.attempt,
			next_attempt_at = CASE WHEN x.state = 'pending' THEN now() + x.delay * interval '1 microsecond' ELSE r.next_attempt_at END,
			last_error = coalesce(x.err, r.last_error),
			dispatched_at = CASE WHEN x.state = 'dispatched' THEN now() END,
			dead_lettered_at = CASE WHEN x.state = 'dead_letter' THEN now() END
		FROM unnest(p_qseq, p_qstate, p_qattempt, p_qdelay_us, p_qerr) AS x(qseq, state, attempt, delay, err)
		WHERE r.qseq = x.qseq AND r.part = p_part AND r.state = 'pending';
	END IF;
	RETURN true;
END
$fn$;

CREATE VIEW herald.outbox_records AS
SELECT r.id, r.seq, r.part, r.tenant_id, r.channel, r.type, r.schema_version, r.payload, r.freshness,
	r.occurred_at, r.kind, r.state, r.attempt, r.next_attempt_at,
	NULL::text AS lease_owner, NULL::timestamptz AS lease_expires_at, NULL::bigint AS fence,
	r.last_error, r.dispatched_at, r.dead_lettered_at, r.qseq
FROM herald.outbox_retry r
UNION ALL
SELECT o.id, o.seq, o.part, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness,
	o.occurred_at, o.kind, d.state, 0, o.occurred_at,
	CASE WHEN d.state = 'processing' THEN p.owner END, CASE WHEN d.state = 'processing' THEN p.expires_at END,
	CASE WHEN d.state = 'processing' THEN p.fence END,
	NULL::text,
	CASE WHEN d.state = 'dispatched' THEN coalesce((SELECT b.done_at FROM herald.outbox_batch b
		WHERE b.part = o.part AND pg_visible_in_snapshot(o.xid, b.hi) AND NOT pg_visible_in_snapshot(o.xid, b.lo)
			AND CASE WHEN b.by_seq THEN o.seq > b.from_seq AND o.seq <= b.to_seq
				ELSE (o.xid, o.seq) > (b.from_xid, b.from_seq) AND (o.xid, o.seq) <= (b.to_xid, b.to_seq) END
		ORDER BY b.done_at LIMIT 1), p.done_at, o.occurred_at) END,
	NULL::timestamptz, NULL::bigint
FROM herald.outbox_all o
JOIN herald.outbox_partition p ON p.part = o.part
CROSS JOIN LATERAL (SELECT CASE
	WHEN pg_visible_in_snapshot(o.xid, p.lo)
		OR (p.hi IS NOT NULL AND pg_visible_in_snapshot(o.xid, p.hi) AND o.seq <= p.pos_seq)
		THEN 'dispatched'
	WHEN p.open AND p.expires_at > now() AND pg_visible_in_snapshot(o.xid, p.hi) THEN 'processing'
	ELSE 'pending' END AS state) d
WHERE NOT EXISTS (SELECT 1 FROM herald.outbox_retry q WHERE q.seq = o.seq);
