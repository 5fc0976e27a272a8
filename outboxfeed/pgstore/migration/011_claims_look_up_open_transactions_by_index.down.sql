-- migration 11 reversed: the claim functions join the open transactions'
-- xids laterally again, as migration 8 wrote them.

CREATE OR REPLACE FUNCTION herald.outbox_claim(p_handler text, p_part int, p_owner text, p_lease interval, p_limit int, p_tries int, p_range_limit int)
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
	-- A paused or disabled handler (or one dropped) claims nothing.
	IF NOT EXISTS (SELECT 1 FROM herald.outbox_handler h WHERE h.name = p_handler AND h.state = 'active') THEN
		RETURN;
	END IF;
	-- The last retiring partition retired (by this or another claim):
	-- the waiting ones take over.
	IF EXISTS (SELECT 1 FROM herald.outbox_partition p WHERE p.handler = p_handler AND p.state = 'waiting')
		AND NOT EXISTS (SELECT 1 FROM herald.outbox_partition p WHERE p.handler = p_handler AND p.state = 'retiring') THEN
		UPDATE herald.outbox_partition p SET state = 'active' WHERE p.handler = p_handler AND p.state = 'waiting';
	END IF;
	LOOP
		tries := tries + 1;
		-- Lock the row first, then take the snapshot in a statement of its
		-- own: a snapshot taken before waiting for another claim's update of
		-- the row could be older than the lo that claim wrote.
		IF p_part >= 0 THEN
			SELECT * INTO l FROM herald.outbox_partition p
			WHERE p.handler = p_handler AND p.part = p_part AND p.state IN ('active', 'retiring')
				AND (p.owner IS NULL OR p.owner = p_owner OR p.expires_at < clock_timestamp())
			FOR UPDATE;
		ELSE
			-- Only a partition with work is leased: one that has a range open
			-- (a takeover, or the rest of a range), is retiring, or has a
			-- record committed past its position or a retry due. An idle
			-- partition costs a few index probes and no write.
			SELECT * INTO l FROM herald.outbox_partition p
			WHERE p.handler = p_handler AND p.state IN ('active', 'retiring') AND (p.owner IS NULL OR p.expires_at < clock_timestamp())
				AND p.part <> ALL (tried)
				AND (p.open OR p.hi IS NOT NULL OR p.state = 'retiring'
					OR EXISTS (SELECT 1 FROM herald.outbox o WHERE o.part = p.part AND (o.xid, o.seq) >= (pg_snapshot_xmax(p.lo), 0))
					OR EXISTS (SELECT 1 FROM pg_snapshot_xip(p.lo) x(xid)
						CROSS JOIN LATERAL (SELECT 1 FROM herald.outbox o WHERE o.part = p.part AND o.xid = x.xid LIMIT 1) o)
					OR EXISTS (SELECT 1 FROM herald.outbox_retry r WHERE r.handler = p_handler AND r.part = p.part AND r.state = 'pending' AND r.next_attempt_at <= now()))
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
		WHERE p.handler = p_handler AND p.part = l.part
		RETURNING p.* INTO l;

		found_q := 0;
		IF EXISTS (SELECT 1 FROM herald.outbox_retry r WHERE r.handler = p_handler AND r.part = l.part AND r.state = 'pending') THEN
			RETURN QUERY
			WITH heads AS (
				SELECT DISTINCT ON (r.tenant_id, r.channel) r.tenant_id, r.channel, r.qseq AS head, r.next_attempt_at <= now() AS due
				FROM herald.outbox_retry r WHERE r.handler = p_handler AND r.part = l.part AND r.state = 'pending'
				ORDER BY r.tenant_id, r.channel, r.qseq),
			due AS (SELECT h.tenant_id, h.channel, h.head FROM heads h WHERE h.due ORDER BY h.head LIMIT p_limit),
			share AS (SELECT (p_limit + count(*) - 1) / greatest(count(*), 1) AS n FROM due)
			SELECT 'q'::"char", l.part, l.fence, l.takeovers, r.qseq, r.attempt, true,
				r.id, r.seq, NULL::xid8, r.tenant_id, r.channel, r.type, r.schema_version,
				r.payload, r.freshness, r.occurred_at, r.kind, l.tk_range, l.tk_qseq
			FROM due h CROSS JOIN share s JOIN LATERAL (
				SELECT * FROM herald.outbox_retry r WHERE r.handler = p_handler AND r.part = l.part AND r.state = 'pending'
					AND r.tenant_id = h.tenant_id AND r.channel = h.channel ORDER BY r.qseq LIMIT greatest(s.n, 1)) r ON true
			ORDER BY h.head, r.qseq;
			GET DIAGNOSTICS found_q = ROW_COUNT;
			IF found_q > 0 THEN
				-- At least every row handed out (for a takeover's tk_qseq).
				UPDATE herald.outbox_partition p SET claim_qto = (SELECT max(r.qseq) FROM herald.outbox_retry r
					WHERE r.handler = p_handler AND r.part = l.part AND r.state = 'pending')
				WHERE p.handler = p_handler AND p.part = l.part;
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
			IF found_q > 0 OR n > 0 AND EXISTS (SELECT 1 FROM herald.outbox_retry r WHERE r.handler = p_handler AND r.part = l.part AND r.state = 'pending') THEN
				RETURN QUERY
				SELECT 'h'::"char", l.part, l.fence, l.takeovers, count(*), 0,
					(array_agg(r.next_attempt_at ORDER BY r.qseq))[1] <= now(),
					NULL::uuid, NULL::bigint, NULL::xid8, r.tenant_id, r.channel, NULL::text, NULL::int,
					NULL::jsonb, NULL::jsonb, NULL::timestamptz, NULL::text, l.tk_range, l.tk_qseq
				FROM herald.outbox_retry r WHERE r.handler = p_handler AND r.part = l.part AND r.state = 'pending'
				GROUP BY r.tenant_id, r.channel;
			END IF;
			RETURN;
		END IF;

		-- Nothing to dispatch: the range is done; give the lease back.
		UPDATE herald.outbox_partition p SET lo = p.hi, hi = NULL, pos_xid = '0', pos_seq = 0,
			open = false, takeovers = 0, tk_range = false, owner = NULL, expires_at = NULL
		WHERE p.handler = p_handler AND p.part = l.part
		RETURNING p.* INTO l;
		IF l.state = 'retiring' THEN
			PERFORM herald.outbox_retire(p_handler, l.part);
		END IF;
		IF p_part >= 0 OR tries >= p_tries THEN
			RETURN;
		END IF;
	END LOOP;
END
$fn$;


CREATE OR REPLACE FUNCTION herald.outbox_range_runs(p_handler text, p_part int, p_max int)
RETURNS TABLE (r_xid xid8, r_from bigint, r_to bigint, r_n int)
LANGUAGE plpgsql SET enable_bitmapscan = off SET enable_seqscan = off AS $fn$
DECLARE
	l herald.outbox_partition;
BEGIN
	SELECT * INTO l FROM herald.outbox_partition p WHERE p.handler = p_handler AND p.part = p_part AND p.hi IS NOT NULL;
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

