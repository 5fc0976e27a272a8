-- migration 16 reversed: part is a generated column again, of the outbox
-- and of its archive, and the wake-up trigger, where it is installed, is
-- the statement-level one of migration 14. PostgreSQL 15 cannot make a
-- column generated in place: a new generated column takes the old one's
-- place, which rewrites every segment (the outbox and its archive are
-- locked meanwhile) and computes every record's partition with
-- herald.outbox_partition_of. That keeps each record in its partition
-- only when every record was staged under the current partition count:
-- the down check refuses otherwise, and the step fails, changing nothing,
-- should a record have moved all the same.

CREATE FUNCTION herald.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
-- herald:rest-from 013_wakeup_armed_in_a_sequence.up.sql

-- herald.outbox_partition_of is PL/pgSQL again, as migration 10 writes
-- it (checked against the SQL function on 4,096 channel names), with the
-- same partition base and count.
DO $mig$
-- herald:rest-from 010_partition_of_in_plpgsql_and_batch_handler_by_trigger.up.sql

DO $mig$
DECLARE
	notify boolean := EXISTS (SELECT 1 FROM pg_trigger
		WHERE tgrelid = 'herald.outbox'::regclass AND tgname = 'outbox_stage' AND NOT tgisinternal
			AND tgfoid = 'herald.outbox_stage_notify()'::regprocedure);
	view_all text := pg_get_viewdef('herald.outbox_all'::regclass);
	moved bigint;
BEGIN
	LOCK TABLE herald.outbox, herald.outbox_archive IN ACCESS EXCLUSIVE MODE;
	DROP TRIGGER outbox_stage ON herald.outbox;
	DROP TRIGGER outbox_part_kept ON herald.outbox;
	-- The views read the old column until herald.outbox_all is made
	-- again from its own definition; herald.outbox_records reads that.
	ALTER TABLE herald.outbox RENAME COLUMN part TO part_before_16;
	ALTER TABLE herald.outbox_archive RENAME COLUMN part TO part_before_16;
	ALTER TABLE herald.outbox ADD COLUMN part int NOT NULL GENERATED ALWAYS AS (herald.outbox_partition_of(tenant_id, channel)) STORED;
	ALTER TABLE herald.outbox_archive ADD COLUMN part int NOT NULL GENERATED ALWAYS AS (herald.outbox_partition_of(tenant_id, channel)) STORED;
	EXECUTE 'CREATE OR REPLACE VIEW herald.outbox_all AS ' || view_all;
	SELECT (SELECT count(*) FROM herald.outbox WHERE part <> part_before_16)
		+ (SELECT count(*) FROM herald.outbox_archive WHERE part <> part_before_16) INTO moved;
	IF moved > 0 THEN
		RAISE EXCEPTION 'migration 16 down: % records would move to another partition (staged under another partition count): nothing changed', moved;
	END IF;
	ALTER TABLE herald.outbox DROP COLUMN part_before_16;
	ALTER TABLE herald.outbox_archive DROP COLUMN part_before_16;
	CREATE INDEX outbox_part_xid_idx ON herald.outbox (part, xid, seq);
	CREATE INDEX outbox_archive_part_xid_idx ON herald.outbox_archive (part, xid, seq);
	IF notify THEN
		CREATE TRIGGER outbox_notify AFTER INSERT ON herald.outbox
-- herald:rest-from 014_wakeup_trigger_runs_only_when_armed.up.sql
	END IF;
END
$mig$;

DROP FUNCTION herald.outbox_stage();
DROP FUNCTION herald.outbox_stage_notify();
