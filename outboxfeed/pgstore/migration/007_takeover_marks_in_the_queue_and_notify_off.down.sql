-- migration 7 reversed: the functions of migration 6 again.
--
-- Migration 7 changed two functions and no table, so nothing moves:
--
--   - outbox_complete loses p_takeover. The marks migration 7 added
--     (tk_qseq over the retry-queue rows a taken-over batch put there) stay
--     in the partition rows, where migration 6's claim reads them, so those
--     rows still leave the queue as a takeover.
--   - outbox_notify sends the NOTIFY whatever herald.notify says: a producer
--     that commits in two phases must stop relying on
--     SET LOCAL herald.notify = off first (or the trigger be dropped, with
--     herald migrate --outbox-notify=false), or its PREPARE TRANSACTION fails.

DROP FUNCTION herald.outbox_complete(int, text, bigint, boolean, boolean, bigint, int,
	bigint[], xid8[], text[], int[], bigint[], text[], bigint[], text[], int[], bigint[], text[]);
CREATE FUNCTION herald.outbox_complete(p_part int, p_owner text, p_fence bigint, p_range_done boolean,
	p_last_seq bigint, p_records int,
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

CREATE OR REPLACE FUNCTION herald.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	IF EXISTS (SELECT 1 FROM herald.outbox_wakeup WHERE armed_until > statement_timestamp()) THEN
		PERFORM pg_notify('herald_outbox', '');
	END IF;
	RETURN NULL;
END
$fn$;
