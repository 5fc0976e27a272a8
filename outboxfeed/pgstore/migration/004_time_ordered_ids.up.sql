-- migration 4 makes the ids PostgreSQL generates time-ordered. A random
-- (version 4) uuid puts each new record's id index entry on a random leaf
-- page, and gen_random_uuid() reads the kernel's random source per row:
-- together they were a third of a producer's insert. herald.outbox_new_id
-- makes a version 7 uuid: 48 bits of the clock's milliseconds and, in
-- place of the random bits, a sequence value, so ids are unique in the
-- database and each new entry lands at the right edge of the index.
-- Ids made by the staging helpers (stage.NewID) are version 7 too.

CREATE SEQUENCE herald.outbox_id_seq;
CREATE FUNCTION herald.outbox_new_id() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE AS $fn$
	SELECT encode(
		int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint << 16 | 28672)
		|| int8send(nextval('herald.outbox_id_seq') & 4611686018427387903 | -9223372036854775808),
		'hex')::uuid
$fn$;
ALTER TABLE herald.outbox ALTER COLUMN id SET DEFAULT herald.outbox_new_id();
CREATE OR REPLACE FUNCTION herald.stage_notification(
	tenant_id text, channel text, type text, schema_version int, payload jsonb,
	id uuid DEFAULT NULL, freshness jsonb DEFAULT NULL
) RETURNS uuid LANGUAGE sql AS $fn$
	INSERT INTO herald.outbox (id, tenant_id, channel, type, schema_version, payload, freshness)
	VALUES (coalesce($6, herald.outbox_new_id()), $1, $2, $3, $4, $5,
	        coalesce($7, '{"mode":"immediate"}'::jsonb))
	RETURNING id
$fn$;
