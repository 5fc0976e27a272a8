-- migration 12 reversed: the kind and schema_version CHECK constraints
-- come back on the outbox and its archive, and so on every segment (every
-- row is checked; the down check has named any that would fail), and
-- herald.stage_notification is migration 9's again. The type and
-- freshness constraints migration 12 took off the segments of migration
-- 9's day stay off: migration 9 meant them gone.

ALTER TABLE herald.outbox
	ADD CONSTRAINT outbox_kind CHECK (kind IN ('notification', 'integration_event', 'journey_step_command', 'provider_side_effect')),
	ADD CONSTRAINT outbox_schema_version_positive CHECK (schema_version >= 1);
ALTER TABLE herald.outbox_archive
	ADD CONSTRAINT outbox_kind CHECK (kind IN ('notification', 'integration_event', 'journey_step_command', 'provider_side_effect')),
	ADD CONSTRAINT outbox_schema_version_positive CHECK (schema_version >= 1);

CREATE OR REPLACE FUNCTION herald.stage_notification(
-- herald:rest-from 009_type_and_freshness_checked_by_the_worker.up.sql
