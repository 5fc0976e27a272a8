-- migration 5 takes done segments out of the tables claims read.
--
-- A claim's statements read herald.outbox by (part, xid, seq), which no
-- seq range can narrow, so each of them opens every segment attached to
-- it: with a week of retention that is hundreds of segments per claim, and
-- a claim's cost grew with the retention. A full segment whose records are
-- all done now moves (detach, attach) to herald.outbox_archive, which only
-- operators' reads (herald.outbox_records, through herald.outbox_all)
-- see, and is dropped from there once past the retention. herald.outbox
-- keeps the default partition, the segment receiving records, the few
-- made ahead of it and any not yet done.
--
-- herald.outbox_segment records when a segment was archived and the
-- newest occurred_at it holds, so the Pruner tells an archived segment's
-- age without reading it.

CREATE TABLE herald.outbox_archive (LIKE herald.outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED)
	PARTITION BY RANGE (seq);
CREATE INDEX outbox_archive_part_xid_idx ON herald.outbox_archive (part, xid, seq);
CREATE INDEX outbox_archive_id_idx ON herald.outbox_archive (id);
ALTER TABLE herald.outbox_segment ADD COLUMN archived_at timestamptz, ADD COLUMN newest_at timestamptz;

CREATE VIEW herald.outbox_all AS
SELECT id, seq, xid, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind, part FROM herald.outbox
UNION ALL
SELECT id, seq, xid, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind, part FROM herald.outbox_archive;

CREATE OR REPLACE VIEW herald.outbox_records AS
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
			AND (o.xid, o.seq) > (b.from_xid, b.from_seq) AND (o.xid, o.seq) <= (b.to_xid, b.to_seq)
		ORDER BY b.done_at LIMIT 1), p.done_at, o.occurred_at) END,
	NULL::timestamptz, NULL::bigint
FROM herald.outbox_all o
JOIN herald.outbox_partition p ON p.part = o.part
CROSS JOIN LATERAL (SELECT CASE
	WHEN pg_visible_in_snapshot(o.xid, p.lo)
		OR (p.hi IS NOT NULL AND pg_visible_in_snapshot(o.xid, p.hi) AND (o.xid, o.seq) <= (p.pos_xid, p.pos_seq))
		THEN 'dispatched'
	WHEN p.open AND p.expires_at > now() AND pg_visible_in_snapshot(o.xid, p.hi) THEN 'processing'
	ELSE 'pending' END AS state) d
WHERE NOT EXISTS (SELECT 1 FROM herald.outbox_retry q WHERE q.seq = o.seq);
