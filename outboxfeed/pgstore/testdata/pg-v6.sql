--
-- PostgreSQL database dump
--

\restrict bTb9L0YZIJBRJQmSewqv8RusNQEwDrh5ZNPOVlfy4JL399IXakIU7kPaHKm632H

-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: herald; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA herald;


--
-- Name: outbox_claim(integer, text, interval, integer, integer, integer); Type: FUNCTION; Schema: herald; Owner: -
--

CREATE FUNCTION herald.outbox_claim(p_part integer, p_owner text, p_lease interval, p_limit integer, p_tries integer, p_range_limit integer) RETURNS TABLE(r_kind "char", r_part integer, r_fence bigint, r_takeovers integer, r_qseq bigint, r_attempt integer, r_due boolean, r_id uuid, r_seq bigint, r_xid xid8, r_tenant text, r_channel text, r_type text, r_version integer, r_payload jsonb, r_freshness jsonb, r_occurred timestamp with time zone, r_kind2 text, r_tk boolean, r_tkq bigint)
    LANGUAGE plpgsql
    SET enable_bitmapscan TO 'off'
    SET enable_seqscan TO 'off'
    AS $$
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
$$;


--
-- Name: outbox_complete(integer, text, bigint, boolean, bigint, integer, bigint[], xid8[], text[], integer[], bigint[], text[], bigint[], text[], integer[], bigint[], text[]); Type: FUNCTION; Schema: herald; Owner: -
--

CREATE FUNCTION herald.outbox_complete(p_part integer, p_owner text, p_fence bigint, p_range_done boolean, p_last_seq bigint, p_records integer, p_seq bigint[], p_xid xid8[], p_state text[], p_attempt integer[], p_delay_us bigint[], p_err text[], p_qseq bigint[], p_qstate text[], p_qattempt integer[], p_qdelay_us bigint[], p_qerr text[]) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
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
$$;


--
-- Name: outbox_keep(integer, text, interval, bigint); Type: FUNCTION; Schema: herald; Owner: -
--

CREATE FUNCTION herald.outbox_keep(p_part integer, p_owner text, p_lease interval, p_fence bigint) RETURNS TABLE(r_fence bigint, r_tk boolean, r_tenant text, r_channel text)
    LANGUAGE plpgsql
    AS $$
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
$$;


--
-- Name: outbox_new_id(); Type: FUNCTION; Schema: herald; Owner: -
--

CREATE FUNCTION herald.outbox_new_id() RETURNS uuid
    LANGUAGE sql PARALLEL SAFE
    AS $$
	SELECT encode(
		int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint << 16 | 28672)
		|| int8send(nextval('herald.outbox_id_seq') & 4611686018427387903 | -9223372036854775808),
		'hex')::uuid
$$;


--
-- Name: outbox_notify(); Type: FUNCTION; Schema: herald; Owner: -
--

CREATE FUNCTION herald.outbox_notify() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM herald.outbox_wakeup WHERE armed_until > statement_timestamp()) THEN
		PERFORM pg_notify('herald_outbox', '');
	END IF;
	RETURN NULL;
END
$$;


--
-- Name: outbox_open_vxids(); Type: FUNCTION; Schema: herald; Owner: -
--

CREATE FUNCTION herald.outbox_open_vxids() RETURNS text[]
    LANGUAGE sql STABLE
    AS $$
	SELECT coalesce(array_agg(k.virtualxid), '{}') FROM pg_locks k
	WHERE k.locktype = 'virtualxid' AND k.pid <> pg_backend_pid() AND k.granted
$$;


--
-- Name: outbox_partition_of(text, text); Type: FUNCTION; Schema: herald; Owner: -
--

CREATE FUNCTION herald.outbox_partition_of(tenant_id text, channel text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT ((hashtextextended(tenant_id || '/' || channel, 0) & 9223372036854775807) % 4)::int $$;


--
-- Name: outbox_range_runs(integer, integer); Type: FUNCTION; Schema: herald; Owner: -
--

CREATE FUNCTION herald.outbox_range_runs(p_part integer, p_max integer) RETURNS TABLE(r_xid xid8, r_from bigint, r_to bigint, r_n integer)
    LANGUAGE plpgsql
    SET enable_bitmapscan TO 'off'
    SET enable_seqscan TO 'off'
    AS $$
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
$$;


--
-- Name: outbox_read_runs(integer, xid8[], bigint[], bigint[], integer); Type: FUNCTION; Schema: herald; Owner: -
--

CREATE FUNCTION herald.outbox_read_runs(p_part integer, p_xid xid8[], p_from bigint[], p_to bigint[], p_limit integer) RETURNS TABLE(r_id uuid, r_seq bigint, r_xid xid8, r_tenant text, r_channel text, r_type text, r_version integer, r_payload jsonb, r_freshness jsonb, r_occurred timestamp with time zone, r_kind2 text)
    LANGUAGE sql STABLE
    SET enable_bitmapscan TO 'off'
    SET enable_seqscan TO 'off'
    AS $$
	SELECT o.id, o.seq, o.xid, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness, o.occurred_at, o.kind
	FROM unnest(p_xid, p_from, p_to) WITH ORDINALITY AS u(xid, f, t, ord)
	CROSS JOIN LATERAL (SELECT * FROM herald.outbox o WHERE o.part = p_part AND o.xid = u.xid AND o.seq BETWEEN u.f AND u.t
		ORDER BY o.seq LIMIT p_limit) o
	ORDER BY u.ord, o.seq LIMIT p_limit
$$;


--
-- Name: outbox_retire(integer); Type: FUNCTION; Schema: herald; Owner: -
--

CREATE FUNCTION herald.outbox_retire(p_part integer) RETURNS void
    LANGUAGE plpgsql
    AS $$
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
$$;


--
-- Name: outbox_v2_forward(); Type: FUNCTION; Schema: herald; Owner: -
--

CREATE FUNCTION herald.outbox_v2_forward() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
	INSERT INTO herald.outbox (id, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind)
	VALUES (NEW.id, NEW.tenant_id, NEW.channel, NEW.type, NEW.schema_version, NEW.payload, NEW.freshness, NEW.occurred_at, NEW.kind);
	RETURN NULL;
END
$$;


--
-- Name: stage_notification(text, text, text, integer, jsonb, uuid, jsonb); Type: FUNCTION; Schema: herald; Owner: -
--

CREATE FUNCTION herald.stage_notification(tenant_id text, channel text, type text, schema_version integer, payload jsonb, id uuid DEFAULT NULL::uuid, freshness jsonb DEFAULT NULL::jsonb) RETURNS uuid
    LANGUAGE sql
    AS $_$
	INSERT INTO herald.outbox (id, tenant_id, channel, type, schema_version, payload, freshness)
	VALUES (coalesce($6, herald.outbox_new_id()), $1, $2, $3, $4, $5,
	        coalesce($7, '{"mode":"immediate"}'::jsonb))
	RETURNING id
$_$;


--
-- Name: outbox_record_seq; Type: SEQUENCE; Schema: herald; Owner: -
--

CREATE SEQUENCE herald.outbox_record_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


SET default_tablespace = '';

--
-- Name: outbox; Type: TABLE; Schema: herald; Owner: -
--

CREATE TABLE herald.outbox (
    id uuid DEFAULT herald.outbox_new_id() NOT NULL,
    seq bigint DEFAULT nextval('herald.outbox_record_seq'::regclass) NOT NULL,
    xid xid8 DEFAULT pg_current_xact_id() NOT NULL,
    tenant_id text NOT NULL,
    channel text NOT NULL,
    type text NOT NULL,
    schema_version integer NOT NULL,
    payload jsonb NOT NULL,
    freshness jsonb DEFAULT '{"mode": "immediate"}'::jsonb NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() NOT NULL,
    kind text DEFAULT 'notification'::text NOT NULL,
    part integer GENERATED ALWAYS AS (herald.outbox_partition_of(tenant_id, channel)) STORED NOT NULL,
    CONSTRAINT outbox_freshness_mode CHECK ((((freshness ->> 'mode'::text) = 'immediate'::text) OR (((freshness ->> 'mode'::text) = 'advisory'::text) AND (COALESCE((freshness ->> 'authority'::text), ''::text) <> ''::text)))),
    CONSTRAINT outbox_kind CHECK ((kind = ANY (ARRAY['notification'::text, 'integration_event'::text, 'journey_step_command'::text, 'provider_side_effect'::text]))),
    CONSTRAINT outbox_schema_version_positive CHECK ((schema_version >= 1)),
    CONSTRAINT outbox_type_format CHECK ((((length(type) >= 1) AND (length(type) <= 128)) AND (ltrim(type, 'abcdefghijklmnopqrstuvwxyz0123456789_.-'::text) = ''::text)))
)
PARTITION BY RANGE (seq);


--
-- Name: outbox_archive; Type: TABLE; Schema: herald; Owner: -
--

CREATE TABLE herald.outbox_archive (
    id uuid DEFAULT herald.outbox_new_id() NOT NULL,
    seq bigint DEFAULT nextval('herald.outbox_record_seq'::regclass) NOT NULL,
    xid xid8 DEFAULT pg_current_xact_id() NOT NULL,
    tenant_id text NOT NULL,
    channel text NOT NULL,
    type text NOT NULL,
    schema_version integer NOT NULL,
    payload jsonb NOT NULL,
    freshness jsonb DEFAULT '{"mode": "immediate"}'::jsonb NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() NOT NULL,
    kind text DEFAULT 'notification'::text NOT NULL,
    part integer GENERATED ALWAYS AS (herald.outbox_partition_of(tenant_id, channel)) STORED NOT NULL,
    CONSTRAINT outbox_freshness_mode CHECK ((((freshness ->> 'mode'::text) = 'immediate'::text) OR (((freshness ->> 'mode'::text) = 'advisory'::text) AND (COALESCE((freshness ->> 'authority'::text), ''::text) <> ''::text)))),
    CONSTRAINT outbox_kind CHECK ((kind = ANY (ARRAY['notification'::text, 'integration_event'::text, 'journey_step_command'::text, 'provider_side_effect'::text]))),
    CONSTRAINT outbox_schema_version_positive CHECK ((schema_version >= 1)),
    CONSTRAINT outbox_type_format CHECK ((((length(type) >= 1) AND (length(type) <= 128)) AND (ltrim(type, 'abcdefghijklmnopqrstuvwxyz0123456789_.-'::text) = ''::text)))
)
PARTITION BY RANGE (seq);


--
-- Name: outbox_all; Type: VIEW; Schema: herald; Owner: -
--

CREATE VIEW herald.outbox_all AS
 SELECT outbox.id,
    outbox.seq,
    outbox.xid,
    outbox.tenant_id,
    outbox.channel,
    outbox.type,
    outbox.schema_version,
    outbox.payload,
    outbox.freshness,
    outbox.occurred_at,
    outbox.kind,
    outbox.part
   FROM herald.outbox
UNION ALL
 SELECT outbox_archive.id,
    outbox_archive.seq,
    outbox_archive.xid,
    outbox_archive.tenant_id,
    outbox_archive.channel,
    outbox_archive.type,
    outbox_archive.schema_version,
    outbox_archive.payload,
    outbox_archive.freshness,
    outbox_archive.occurred_at,
    outbox_archive.kind,
    outbox_archive.part
   FROM herald.outbox_archive;


SET default_table_access_method = heap;

--
-- Name: outbox_batch; Type: TABLE; Schema: herald; Owner: -
--

CREATE TABLE herald.outbox_batch (
    part integer NOT NULL,
    fence bigint NOT NULL,
    lo pg_snapshot NOT NULL,
    hi pg_snapshot NOT NULL,
    from_xid xid8 NOT NULL,
    from_seq bigint NOT NULL,
    to_xid xid8 NOT NULL,
    to_seq bigint NOT NULL,
    records integer NOT NULL,
    done_at timestamp with time zone DEFAULT now() NOT NULL,
    by_seq boolean DEFAULT false NOT NULL
);


--
-- Name: outbox_default; Type: TABLE; Schema: herald; Owner: -
--

CREATE TABLE herald.outbox_default (
    id uuid DEFAULT herald.outbox_new_id() NOT NULL,
    seq bigint DEFAULT nextval('herald.outbox_record_seq'::regclass) NOT NULL,
    xid xid8 DEFAULT pg_current_xact_id() NOT NULL,
    tenant_id text NOT NULL,
    channel text NOT NULL,
    type text NOT NULL,
    schema_version integer NOT NULL,
    payload jsonb NOT NULL,
    freshness jsonb DEFAULT '{"mode": "immediate"}'::jsonb NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() NOT NULL,
    kind text DEFAULT 'notification'::text NOT NULL,
    part integer GENERATED ALWAYS AS (herald.outbox_partition_of(tenant_id, channel)) STORED NOT NULL,
    CONSTRAINT outbox_freshness_mode CHECK ((((freshness ->> 'mode'::text) = 'immediate'::text) OR (((freshness ->> 'mode'::text) = 'advisory'::text) AND (COALESCE((freshness ->> 'authority'::text), ''::text) <> ''::text)))),
    CONSTRAINT outbox_kind CHECK ((kind = ANY (ARRAY['notification'::text, 'integration_event'::text, 'journey_step_command'::text, 'provider_side_effect'::text]))),
    CONSTRAINT outbox_schema_version_positive CHECK ((schema_version >= 1)),
    CONSTRAINT outbox_type_format CHECK ((((length(type) >= 1) AND (length(type) <= 128)) AND (ltrim(type, 'abcdefghijklmnopqrstuvwxyz0123456789_.-'::text) = ''::text)))
);


--
-- Name: outbox_id_seq; Type: SEQUENCE; Schema: herald; Owner: -
--

CREATE SEQUENCE herald.outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: outbox_partition; Type: TABLE; Schema: herald; Owner: -
--

CREATE TABLE herald.outbox_partition (
    part integer NOT NULL,
    owner text,
    expires_at timestamp with time zone,
    fence bigint DEFAULT 0 NOT NULL,
    lo pg_snapshot NOT NULL,
    hi pg_snapshot,
    pos_xid xid8 DEFAULT '0'::xid8 NOT NULL,
    pos_seq bigint DEFAULT 0 NOT NULL,
    open boolean DEFAULT false NOT NULL,
    takeovers integer DEFAULT 0 NOT NULL,
    state text DEFAULT 'active'::text NOT NULL,
    claimed_at timestamp with time zone,
    done_at timestamp with time zone,
    batches bigint DEFAULT 0 NOT NULL,
    tk_range boolean DEFAULT false NOT NULL,
    claim_qto bigint DEFAULT 0 NOT NULL,
    tk_qseq bigint DEFAULT 0 NOT NULL,
    CONSTRAINT outbox_partition_lease CHECK (((owner IS NULL) = (expires_at IS NULL))),
    CONSTRAINT outbox_partition_open CHECK (((NOT open) OR (owner IS NOT NULL))),
    CONSTRAINT outbox_partition_state CHECK ((state = ANY (ARRAY['active'::text, 'retiring'::text, 'waiting'::text, 'retired'::text])))
)
WITH (fillfactor='10');


--
-- Name: outbox_retry; Type: TABLE; Schema: herald; Owner: -
--

CREATE TABLE herald.outbox_retry (
    qseq bigint NOT NULL,
    id uuid NOT NULL,
    seq bigint NOT NULL,
    xid xid8,
    rec_part integer,
    part integer NOT NULL,
    tenant_id text NOT NULL,
    channel text NOT NULL,
    type text NOT NULL,
    schema_version integer NOT NULL,
    payload jsonb NOT NULL,
    freshness jsonb NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    kind text NOT NULL,
    state text NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    last_error text,
    dispatched_at timestamp with time zone,
    dead_lettered_at timestamp with time zone,
    CONSTRAINT outbox_retry_attempt CHECK ((attempt >= 0)),
    CONSTRAINT outbox_retry_dead_letter_columns CHECK (((state <> 'dead_letter'::text) OR ((dead_lettered_at IS NOT NULL) AND (last_error IS NOT NULL) AND (dispatched_at IS NULL)))),
    CONSTRAINT outbox_retry_dispatched_columns CHECK (((state <> 'dispatched'::text) OR ((dispatched_at IS NOT NULL) AND (dead_lettered_at IS NULL)))),
    CONSTRAINT outbox_retry_pending_columns CHECK (((state <> 'pending'::text) OR ((dispatched_at IS NULL) AND (dead_lettered_at IS NULL)))),
    CONSTRAINT outbox_retry_state CHECK ((state = ANY (ARRAY['pending'::text, 'dispatched'::text, 'dead_letter'::text])))
);


--
-- Name: outbox_records; Type: VIEW; Schema: herald; Owner: -
--

CREATE VIEW herald.outbox_records AS
 SELECT r.id,
    r.seq,
    r.part,
    r.tenant_id,
    r.channel,
    r.type,
    r.schema_version,
    r.payload,
    r.freshness,
    r.occurred_at,
    r.kind,
    r.state,
    r.attempt,
    r.next_attempt_at,
    NULL::text AS lease_owner,
    NULL::timestamp with time zone AS lease_expires_at,
    NULL::bigint AS fence,
    r.last_error,
    r.dispatched_at,
    r.dead_lettered_at,
    r.qseq
   FROM herald.outbox_retry r
UNION ALL
 SELECT o.id,
    o.seq,
    o.part,
    o.tenant_id,
    o.channel,
    o.type,
    o.schema_version,
    o.payload,
    o.freshness,
    o.occurred_at,
    o.kind,
    d.state,
    0 AS attempt,
    o.occurred_at AS next_attempt_at,
        CASE
            WHEN (d.state = 'processing'::text) THEN p.owner
            ELSE NULL::text
        END AS lease_owner,
        CASE
            WHEN (d.state = 'processing'::text) THEN p.expires_at
            ELSE NULL::timestamp with time zone
        END AS lease_expires_at,
        CASE
            WHEN (d.state = 'processing'::text) THEN p.fence
            ELSE NULL::bigint
        END AS fence,
    NULL::text AS last_error,
        CASE
            WHEN (d.state = 'dispatched'::text) THEN COALESCE(( SELECT b.done_at
               FROM herald.outbox_batch b
              WHERE ((b.part = o.part) AND pg_visible_in_snapshot(o.xid, b.hi) AND (NOT pg_visible_in_snapshot(o.xid, b.lo)) AND
                    CASE
                        WHEN b.by_seq THEN ((o.seq > b.from_seq) AND (o.seq <= b.to_seq))
                        ELSE ((ROW(o.xid, o.seq) > ROW(b.from_xid, b.from_seq)) AND (ROW(o.xid, o.seq) <= ROW(b.to_xid, b.to_seq)))
                    END)
              ORDER BY b.done_at
             LIMIT 1), p.done_at, o.occurred_at)
            ELSE NULL::timestamp with time zone
        END AS dispatched_at,
    NULL::timestamp with time zone AS dead_lettered_at,
    NULL::bigint AS qseq
   FROM ((herald.outbox_all o
     JOIN herald.outbox_partition p ON ((p.part = o.part)))
     CROSS JOIN LATERAL ( SELECT
                CASE
                    WHEN (pg_visible_in_snapshot(o.xid, p.lo) OR ((p.hi IS NOT NULL) AND pg_visible_in_snapshot(o.xid, p.hi) AND (o.seq <= p.pos_seq))) THEN 'dispatched'::text
                    WHEN (p.open AND (p.expires_at > now()) AND pg_visible_in_snapshot(o.xid, p.hi)) THEN 'processing'::text
                    ELSE 'pending'::text
                END AS state) d)
  WHERE (NOT (EXISTS ( SELECT 1
           FROM herald.outbox_retry q
          WHERE (q.seq = o.seq))));


--
-- Name: outbox_repartition; Type: TABLE; Schema: herald; Owner: -
--

CREATE TABLE herald.outbox_repartition (
    id boolean DEFAULT true NOT NULL,
    retire_xmax xid8,
    wait_vxids text[],
    CONSTRAINT outbox_repartition_one_row CHECK (id)
);


--
-- Name: outbox_replay; Type: TABLE; Schema: herald; Owner: -
--

CREATE TABLE herald.outbox_replay (
    id bigint NOT NULL,
    message_id uuid NOT NULL,
    actor text NOT NULL,
    reason text NOT NULL,
    replayed_at timestamp with time zone DEFAULT now() NOT NULL,
    failure text NOT NULL,
    CONSTRAINT outbox_replay_actor CHECK ((actor <> ''::text)),
    CONSTRAINT outbox_replay_reason CHECK ((reason <> ''::text))
);


--
-- Name: outbox_replay_id_seq; Type: SEQUENCE; Schema: herald; Owner: -
--

ALTER TABLE herald.outbox_replay ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME herald.outbox_replay_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: outbox_retry_qseq_seq; Type: SEQUENCE; Schema: herald; Owner: -
--

ALTER TABLE herald.outbox_retry ALTER COLUMN qseq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME herald.outbox_retry_qseq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: outbox_segment; Type: TABLE; Schema: herald; Owner: -
--

CREATE TABLE herald.outbox_segment (
    name text NOT NULL,
    from_seq bigint NOT NULL,
    to_seq bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    archived_at timestamp with time zone,
    newest_at timestamp with time zone,
    CONSTRAINT outbox_segment_range CHECK ((from_seq < to_seq))
);


--
-- Name: outbox_v2; Type: TABLE; Schema: herald; Owner: -
--

CREATE TABLE herald.outbox_v2 (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    seq bigint NOT NULL,
    tenant_id text NOT NULL,
    channel text NOT NULL,
    type text NOT NULL,
    schema_version integer NOT NULL,
    payload jsonb NOT NULL,
    freshness jsonb DEFAULT '{"mode": "immediate"}'::jsonb NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() NOT NULL,
    kind text DEFAULT 'notification'::text NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    lease_owner text,
    lease_expires_at timestamp with time zone,
    fence bigint DEFAULT 0 NOT NULL,
    last_error text,
    dispatched_at timestamp with time zone,
    dead_lettered_at timestamp with time zone,
    CONSTRAINT outbox_attempt_non_negative CHECK ((attempt >= 0)),
    CONSTRAINT outbox_dead_letter_columns CHECK (((state <> 'dead_letter'::text) OR ((dead_lettered_at IS NOT NULL) AND (last_error IS NOT NULL) AND (lease_owner IS NULL) AND (lease_expires_at IS NULL) AND (dispatched_at IS NULL)))),
    CONSTRAINT outbox_dispatched_columns CHECK (((state <> 'dispatched'::text) OR ((dispatched_at IS NOT NULL) AND (lease_owner IS NULL) AND (lease_expires_at IS NULL) AND (dead_lettered_at IS NULL)))),
    CONSTRAINT outbox_freshness_mode CHECK ((((freshness ->> 'mode'::text) = 'immediate'::text) OR (((freshness ->> 'mode'::text) = 'advisory'::text) AND (COALESCE((freshness ->> 'authority'::text), ''::text) <> ''::text)))),
    CONSTRAINT outbox_kind CHECK ((kind = ANY (ARRAY['notification'::text, 'integration_event'::text, 'journey_step_command'::text, 'provider_side_effect'::text]))),
    CONSTRAINT outbox_pending_columns CHECK (((state <> 'pending'::text) OR ((lease_owner IS NULL) AND (lease_expires_at IS NULL) AND (dispatched_at IS NULL) AND (dead_lettered_at IS NULL)))),
    CONSTRAINT outbox_processing_columns CHECK (((state <> 'processing'::text) OR ((lease_owner IS NOT NULL) AND (lease_expires_at IS NOT NULL) AND (dispatched_at IS NULL) AND (dead_lettered_at IS NULL)))),
    CONSTRAINT outbox_schema_version_positive CHECK ((schema_version >= 1)),
    CONSTRAINT outbox_state CHECK ((state = ANY (ARRAY['pending'::text, 'processing'::text, 'dispatched'::text, 'dead_letter'::text]))),
    CONSTRAINT outbox_type_format CHECK ((((length(type) >= 1) AND (length(type) <= 128)) AND (ltrim(type, 'abcdefghijklmnopqrstuvwxyz0123456789_.-'::text) = ''::text)))
)
WITH (fillfactor='50');


--
-- Name: outbox_seq_seq; Type: SEQUENCE; Schema: herald; Owner: -
--

ALTER TABLE herald.outbox_v2 ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME herald.outbox_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: outbox_wakeup; Type: TABLE; Schema: herald; Owner: -
--

CREATE TABLE herald.outbox_wakeup (
    id boolean DEFAULT true NOT NULL,
    armed_until timestamp with time zone,
    CONSTRAINT outbox_wakeup_one_row CHECK (id)
);


--
-- Name: schema_migrations; Type: TABLE; Schema: herald; Owner: -
--

CREATE TABLE herald.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: outbox_default; Type: TABLE ATTACH; Schema: herald; Owner: -
--

ALTER TABLE ONLY herald.outbox ATTACH PARTITION herald.outbox_default DEFAULT;


--
-- Data for Name: outbox_batch; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_batch (part, fence, lo, hi, from_xid, from_seq, to_xid, to_seq, records, done_at, by_seq) FROM stdin;
3	1	724:724:	726:726:	0	0	0	2	2	2026-12-06 02:36:31.55861+00	t
3	2	726:726:	733:733:	0	0	0	5	3	2026-12-06 02:36:31.571749+00	t
1	1	724:724:	736:736:	0	0	0	7	2	2026-12-06 02:36:31.576659+00	t
\.


--
-- Data for Name: outbox_default; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_default (id, seq, xid, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind) FROM stdin;
01a24935-c9ab-765a-a662-d20f02ba59b7	1	725	acme	f/done	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.531088+00	notification
01a24935-c9ad-7df7-8c02-9d83ad1cf31a	2	725	acme	f/done	order.updated	1	{"n": 2}	{"mode": "immediate"}	2026-12-06 02:36:31.531088+00	notification
01a24935-c9d0-798d-ace5-cd63df61c123	3	731	acme	f/dead	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.568568+00	notification
01a24935-c9d1-790a-ac01-eeb859cba1ba	4	732	acme	f/retry	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.569571+00	notification
01a24935-c9d1-7e8f-b00a-b751bf4cb89f	5	732	acme	f/retry	order.updated	1	{"n": 2}	{"mode": "immediate"}	2026-12-06 02:36:31.569571+00	notification
01a24935-c9d6-72af-9403-4bdc7bfd438e	6	735	acme	f/mid	order.updated	1	{"n": 0}	{"mode": "immediate"}	2026-12-06 02:36:31.574091+00	notification
01a24935-c9d6-775d-9be8-bb25747e6fac	7	735	acme	f/mid	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.574091+00	notification
01a24935-c9d6-7c4b-9231-eab3c0e6f376	8	735	acme	f/mid	order.updated	1	{"n": 2}	{"mode": "immediate"}	2026-12-06 02:36:31.574091+00	notification
01a24935-c9d7-7090-b3d5-1829382e4984	9	735	acme	f/mid	order.updated	1	{"n": 3}	{"mode": "immediate"}	2026-12-06 02:36:31.574091+00	notification
01a24935-c9d7-72bd-b646-cfce8243eba3	10	735	acme	f/mid	order.updated	1	{"n": 4}	{"mode": "immediate"}	2026-12-06 02:36:31.574091+00	notification
01a24935-c9d7-746d-ac5a-a1c214748515	11	735	acme	f/mid	order.updated	1	{"n": 5}	{"mode": "immediate"}	2026-12-06 02:36:31.574091+00	notification
01a24935-c9d9-725f-ba4c-4f24dd691a32	12	738	acme	f/open	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.577086+00	notification
01a24935-c9db-7365-8055-848190a0eb6d	13	740	acme	f/pending	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.57919+00	notification
01a24935-c9db-7651-92d0-febe329cf0b9	14	740	acme	f/pending	order.updated	1	{"n": 2}	{"mode": "immediate"}	2026-12-06 02:36:31.57919+00	notification
\.


--
-- Data for Name: outbox_partition; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_partition (part, owner, expires_at, fence, lo, hi, pos_xid, pos_seq, open, takeovers, state, claimed_at, done_at, batches, tk_range, claim_qto, tk_qseq) FROM stdin;
0	\N	\N	0	724:724:	\N	0	0	f	0	active	\N	\N	0	f	0	0
2	\N	\N	0	724:724:	\N	0	0	f	0	active	\N	\N	0	f	0	0
1	\N	\N	1	724:724:	736:736:	0	7	f	0	active	2026-12-06 02:36:31.575959+00	2026-12-06 02:36:31.576659+00	1	f	0	0
3	dead-worker	2026-12-06 02:36:31.57865+00	3	733:733:	739:739:	0	0	t	0	active	2026-12-06 02:36:31.57765+00	2026-12-06 02:36:31.571749+00	2	f	0	0
\.


--
-- Data for Name: outbox_repartition; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_repartition (id, retire_xmax, wait_vxids) FROM stdin;
t	\N	\N
\.


--
-- Data for Name: outbox_replay; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_replay (id, message_id, actor, reason, replayed_at, failure) FROM stdin;
\.


--
-- Data for Name: outbox_retry; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_retry (qseq, id, seq, xid, rec_part, part, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind, state, attempt, next_attempt_at, last_error, dispatched_at, dead_lettered_at) FROM stdin;
1	01a24935-c9d0-798d-ace5-cd63df61c123	3	731	3	3	acme	f/dead	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.568568+00	notification	dead_letter	1	2026-12-06 02:36:31.571749+00	the target refused it	\N	2026-12-06 02:36:31.571749+00
2	01a24935-c9d1-790a-ac01-eeb859cba1ba	4	732	3	3	acme	f/retry	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.569571+00	notification	pending	1	2026-12-06 03:36:31.571749+00	target busy	\N	\N
3	01a24935-c9d1-7e8f-b00a-b751bf4cb89f	5	732	3	3	acme	f/retry	order.updated	1	{"n": 2}	{"mode": "immediate"}	2026-12-06 02:36:31.569571+00	notification	pending	0	2026-12-06 02:36:31.571749+00	\N	\N	\N
\.


--
-- Data for Name: outbox_segment; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_segment (name, from_seq, to_seq, created_at, archived_at, newest_at) FROM stdin;
\.


--
-- Data for Name: outbox_v2; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_v2 (id, seq, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind, state, attempt, next_attempt_at, lease_owner, lease_expires_at, fence, last_error, dispatched_at, dead_lettered_at) FROM stdin;
\.


--
-- Data for Name: outbox_wakeup; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_wakeup (id, armed_until) FROM stdin;
t	2026-12-06 02:36:31.627064+00
\.


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.schema_migrations (version, name, applied_at) FROM stdin;
1	outbox	2026-12-06 02:36:31.478065+00
2	outbox channel heads	2026-12-06 02:36:31.478065+00
3	partition leases and snapshot batches	2026-12-06 02:36:31.478065+00
4	time-ordered ids	2026-12-06 02:36:31.478065+00
5	archived segments	2026-12-06 02:36:31.478065+00
6	ranges in staging order	2026-12-06 02:36:31.478065+00
\.


--
-- Name: outbox_id_seq; Type: SEQUENCE SET; Schema: herald; Owner: -
--

SELECT pg_catalog.setval('herald.outbox_id_seq', 1, false);


--
-- Name: outbox_record_seq; Type: SEQUENCE SET; Schema: herald; Owner: -
--

SELECT pg_catalog.setval('herald.outbox_record_seq', 14, true);


--
-- Name: outbox_replay_id_seq; Type: SEQUENCE SET; Schema: herald; Owner: -
--

SELECT pg_catalog.setval('herald.outbox_replay_id_seq', 1, false);


--
-- Name: outbox_retry_qseq_seq; Type: SEQUENCE SET; Schema: herald; Owner: -
--

SELECT pg_catalog.setval('herald.outbox_retry_qseq_seq', 3, true);


--
-- Name: outbox_seq_seq; Type: SEQUENCE SET; Schema: herald; Owner: -
--

SELECT pg_catalog.setval('herald.outbox_seq_seq', 1, false);


--
-- Name: outbox_partition outbox_partition_pkey; Type: CONSTRAINT; Schema: herald; Owner: -
--

ALTER TABLE ONLY herald.outbox_partition
    ADD CONSTRAINT outbox_partition_pkey PRIMARY KEY (part);


--
-- Name: outbox_repartition outbox_repartition_pkey; Type: CONSTRAINT; Schema: herald; Owner: -
--

ALTER TABLE ONLY herald.outbox_repartition
    ADD CONSTRAINT outbox_repartition_pkey PRIMARY KEY (id);


--
-- Name: outbox_replay outbox_replay_pkey; Type: CONSTRAINT; Schema: herald; Owner: -
--

ALTER TABLE ONLY herald.outbox_replay
    ADD CONSTRAINT outbox_replay_pkey PRIMARY KEY (id);


--
-- Name: outbox_retry outbox_retry_pkey; Type: CONSTRAINT; Schema: herald; Owner: -
--

ALTER TABLE ONLY herald.outbox_retry
    ADD CONSTRAINT outbox_retry_pkey PRIMARY KEY (qseq);


--
-- Name: outbox_segment outbox_segment_pkey; Type: CONSTRAINT; Schema: herald; Owner: -
--

ALTER TABLE ONLY herald.outbox_segment
    ADD CONSTRAINT outbox_segment_pkey PRIMARY KEY (name);


--
-- Name: outbox_v2 outbox_v2_pkey; Type: CONSTRAINT; Schema: herald; Owner: -
--

ALTER TABLE ONLY herald.outbox_v2
    ADD CONSTRAINT outbox_v2_pkey PRIMARY KEY (id);


--
-- Name: outbox_wakeup outbox_wakeup_pkey; Type: CONSTRAINT; Schema: herald; Owner: -
--

ALTER TABLE ONLY herald.outbox_wakeup
    ADD CONSTRAINT outbox_wakeup_pkey PRIMARY KEY (id);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: herald; Owner: -
--

ALTER TABLE ONLY herald.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: outbox_archive_id_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_archive_id_idx ON ONLY herald.outbox_archive USING btree (id);


--
-- Name: outbox_archive_part_xid_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_archive_part_xid_idx ON ONLY herald.outbox_archive USING btree (part, xid, seq);


--
-- Name: outbox_batch_done_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_batch_done_idx ON herald.outbox_batch USING btree (part, done_at);


--
-- Name: outbox_channel_head_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_channel_head_idx ON herald.outbox_v2 USING btree (tenant_id, channel, seq) WHERE ((dispatched_at IS NULL) AND (dead_lettered_at IS NULL));


--
-- Name: outbox_dead_letter_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_dead_letter_idx ON herald.outbox_v2 USING btree (dead_lettered_at) WHERE (dead_lettered_at IS NOT NULL);


--
-- Name: outbox_id_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_id_idx ON ONLY herald.outbox USING btree (id);


--
-- Name: outbox_default_id_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_default_id_idx ON herald.outbox_default USING btree (id);


--
-- Name: outbox_part_xid_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_part_xid_idx ON ONLY herald.outbox USING btree (part, xid, seq);


--
-- Name: outbox_default_part_xid_seq_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_default_part_xid_seq_idx ON herald.outbox_default USING btree (part, xid, seq);


--
-- Name: outbox_dispatched_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_dispatched_idx ON herald.outbox_v2 USING btree (dispatched_at) WHERE (dispatched_at IS NOT NULL);


--
-- Name: outbox_replay_message_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_replay_message_idx ON herald.outbox_replay USING btree (message_id);


--
-- Name: outbox_retry_dead_letter_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_retry_dead_letter_idx ON herald.outbox_retry USING btree (dead_lettered_at) WHERE (dead_lettered_at IS NOT NULL);


--
-- Name: outbox_retry_dispatched_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_retry_dispatched_idx ON herald.outbox_retry USING btree (dispatched_at) WHERE (dispatched_at IS NOT NULL);


--
-- Name: outbox_retry_id_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_retry_id_idx ON herald.outbox_retry USING btree (id);


--
-- Name: outbox_retry_pending_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_retry_pending_idx ON herald.outbox_retry USING btree (part, tenant_id, channel, qseq) WHERE (state = 'pending'::text);


--
-- Name: outbox_retry_seq_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_retry_seq_idx ON herald.outbox_retry USING btree (seq);


--
-- Name: outbox_unresolved_idx; Type: INDEX; Schema: herald; Owner: -
--

CREATE INDEX outbox_unresolved_idx ON herald.outbox_v2 USING btree (seq) WHERE ((dispatched_at IS NULL) AND (dead_lettered_at IS NULL));


--
-- Name: outbox_default_id_idx; Type: INDEX ATTACH; Schema: herald; Owner: -
--

ALTER INDEX herald.outbox_id_idx ATTACH PARTITION herald.outbox_default_id_idx;


--
-- Name: outbox_default_part_xid_seq_idx; Type: INDEX ATTACH; Schema: herald; Owner: -
--

ALTER INDEX herald.outbox_part_xid_idx ATTACH PARTITION herald.outbox_default_part_xid_seq_idx;


--
-- Name: outbox outbox_notify; Type: TRIGGER; Schema: herald; Owner: -
--

CREATE TRIGGER outbox_notify AFTER INSERT ON herald.outbox FOR EACH STATEMENT EXECUTE FUNCTION herald.outbox_notify();


--
-- Name: outbox_v2 outbox_v2_forward; Type: TRIGGER; Schema: herald; Owner: -
--

CREATE TRIGGER outbox_v2_forward BEFORE INSERT ON herald.outbox_v2 FOR EACH ROW EXECUTE FUNCTION herald.outbox_v2_forward();


--
-- PostgreSQL database dump complete
--

\unrestrict bTb9L0YZIJBRJQmSewqv8RusNQEwDrh5ZNPOVlfy4JL399IXakIU7kPaHKm632H

