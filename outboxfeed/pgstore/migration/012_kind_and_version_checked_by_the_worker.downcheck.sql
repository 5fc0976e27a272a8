-- Migration 12 is reversed only when every record, archived ones
-- included, passes the constraints it dropped: a record staged since with
-- a kind or schema_version they refuse, which the Worker dead-lettered,
-- must go first.
SELECT format('record %s has a kind (%s) or schema_version (%s) that migration 11 refuses (the Worker dead-lettered it): delete it (DELETE FROM herald.outbox WHERE id = %L, or from herald.outbox_archive once archived) and run the command again',
	o.id, o.kind, o.schema_version, o.id)
FROM herald.outbox_all o
WHERE o.kind NOT IN ('notification', 'integration_event', 'journey_step_command', 'provider_side_effect')
	OR o.schema_version < 1
LIMIT 20;
