-- Migration 9 is reversed only when every record, archived ones included,
-- passes the constraints it dropped (a CHECK fails only when its
-- expression is false): a record staged since with an invalid type or
-- freshness, which the Worker dead-lettered, must go first.
SELECT format('record %s has a type (%s) or freshness (%s) that migration 8 refuses (the Worker dead-lettered it): delete it (DELETE FROM herald.outbox WHERE id = %L, or from herald.outbox_archive once archived) and run the command again',
	o.id, o.type, o.freshness, o.id)
FROM herald.outbox_all o
WHERE (length(o.type) BETWEEN 1 AND 128 AND ltrim(o.type, 'abcdefghijklmnopqrstuvwxyz0123456789_.-') = '') IS FALSE
	OR (o.freshness->>'mode' = 'immediate'
		OR (o.freshness->>'mode' = 'advisory' AND coalesce(o.freshness->>'authority', '') <> '')) IS FALSE
LIMIT 20;
