-- migration 9: the type and freshness of a record are checked by the
-- Worker alone. Its CHECK constraints cost a producer's insert about a
-- fifth of its backend CPU (the type's ltrim over the allowed characters,
-- the freshness's jsonb lookups; docs/performance.md), and they duplicate
-- what outboxfeed.Stage checks before the insert and what the Worker checks
-- before it publishes: a record staged by plain SQL with an invalid type
-- or freshness commits and is dead-lettered at once (attempt 1) with the
-- reason in last_error, as one from before the constraints could not be.
-- The kind and schema_version constraints stay (cheap, and not checked by
-- the Worker). The archive loses them too: a segment moves there by
-- ATTACH, which wants the archive's constraints on the segment.
-- herald.stage_notification, the SQL producers' function, keeps refusing
-- an invalid type or freshness with the same error (check_violation), as
-- outboxfeed.Stage does in Go.

ALTER TABLE herald.outbox DROP CONSTRAINT outbox_type_format, DROP CONSTRAINT outbox_freshness_mode;
ALTER TABLE herald.outbox_archive DROP CONSTRAINT outbox_type_format, DROP CONSTRAINT outbox_freshness_mode;

CREATE OR REPLACE FUNCTION herald.stage_notification(
	tenant_id text, channel text, type text, schema_version int, payload jsonb,
	id uuid DEFAULT NULL, freshness jsonb DEFAULT NULL
) RETURNS uuid LANGUAGE plpgsql AS $fn$
DECLARE
	staged uuid;
BEGIN
	IF NOT (length(type) BETWEEN 1 AND 128 AND ltrim(type, 'abcdefghijklmnopqrstuvwxyz0123456789_.-') = '') THEN
		RAISE check_violation USING MESSAGE = format('stage_notification: type %L: want 1-128 characters of [a-z0-9_.-]', type);
	END IF;
	IF freshness IS NOT NULL AND NOT (freshness->>'mode' = 'immediate'
		OR (freshness->>'mode' = 'advisory' AND coalesce(freshness->>'authority', '') <> '')) THEN
		RAISE check_violation USING MESSAGE = format('stage_notification: freshness %s: want {"mode":"immediate"} or {"mode":"advisory","authority":"..."}', freshness);
	END IF;
	INSERT INTO herald.outbox AS o (id, tenant_id, channel, type, schema_version, payload, freshness)
	VALUES (coalesce(stage_notification.id, herald.outbox_new_id()), stage_notification.tenant_id,
	        stage_notification.channel, stage_notification.type, stage_notification.schema_version,
	        stage_notification.payload, coalesce(stage_notification.freshness, '{"mode":"immediate"}'::jsonb))
	RETURNING o.id INTO staged;
	RETURN staged;
END
$fn$;
