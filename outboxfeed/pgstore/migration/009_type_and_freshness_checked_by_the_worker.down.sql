-- migration 9 reversed: the type and freshness CHECK constraints come back
-- on the outbox and its archive (every row is checked; the down check has
-- named any that would fail), and herald.stage_notification is
-- migration 4's again.

ALTER TABLE herald.outbox
	ADD CONSTRAINT outbox_type_format CHECK (length(type) BETWEEN 1 AND 128
		AND ltrim(type, 'abcdefghijklmnopqrstuvwxyz0123456789_.-') = ''),
	ADD CONSTRAINT outbox_freshness_mode CHECK (freshness->>'mode' = 'immediate'
		OR (freshness->>'mode' = 'advisory' AND coalesce(freshness->>'authority', '') <> ''));
ALTER TABLE herald.outbox_archive
	ADD CONSTRAINT outbox_type_format CHECK (length(type) BETWEEN 1 AND 128
		AND ltrim(type, 'abcdefghijklmnopqrstuvwxyz0123456789_.-') = ''),
	ADD CONSTRAINT outbox_freshness_mode CHECK (freshness->>'mode' = 'immediate'
		OR (freshness->>'mode' = 'advisory' AND coalesce(freshness->>'authority', '') <> ''));

CREATE OR REPLACE FUNCTION herald.stage_notification(
-- herald:rest-from 004_time_ordered_ids.up.sql
