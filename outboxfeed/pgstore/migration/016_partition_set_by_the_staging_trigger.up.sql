-- migration 16: a record's partition column, part, is set by a row
-- trigger on insert instead of being a generated column, and the same
-- trigger sends the wake-up. Every INSERT into herald.outbox paid for the
-- generated column's expression twice (PostgreSQL reads it from the
-- catalog's text and builds it for the partitioned table and again for
-- the segment the row goes to, in every statement) before calling
-- herald.outbox_partition_of, and for the wake-up trigger's WHEN
-- condition once more (also read from the catalog's text in every
-- statement): about a sixth of the instructions of a business
-- transaction (docs/performance.md). A row trigger's function is compiled
-- once per session. With herald.outbox_partition_of a SQL function
-- again (below) the business transaction costs PostgreSQL about 18 %
-- fewer instructions. COPY into herald.outbox inserts row by row now
-- (PostgreSQL batches a COPY's rows only into a table without BEFORE ROW
-- triggers): about 1.2-1.3 times as long.
--
-- The column keeps every value it holds (DROP EXPRESSION neither rewrites
-- nor recomputes): records staged under an earlier partition count, and
-- those of a change of the count in progress, stay in their partitions.
-- It stays NOT NULL, so an insert the trigger did not see fails rather
-- than staging a record no partition reads. The trigger sets part with
-- herald.outbox_partition_of, which a change of the partition count
-- replaces as before; an UPDATE that changes tenant_id, channel or part
-- sets it again, as the generated column did. The archive's column, which
-- segments moving there must match, loses its expression too.
--
-- The insert trigger, outbox_stage, runs herald.outbox_stage_notify,
-- which sets part and, while a Worker has armed the wake-up switch, sends
-- the NOTIFY (PostgreSQL sends one per transaction however many rows
-- ask), or, where the wake-up is left out (herald migrate
-- --outbox-notify=false), herald.outbox_stage, which only sets part.
-- The statement-level wake-up trigger, outbox_notify, and its function
-- go.

-- herald.outbox_partition_of becomes a SQL function again, with the same
-- partition base and count, as migration 10's down step writes it.
-- Migration 10 made it PL/pgSQL because the generated column inlined a
-- SQL function's body again in every INSERT; the trigger's function plans
-- the call once per session, inlining the body, and PostgreSQL plans it
-- again when a change of the partition count replaces the function. A
-- change of the count by an older release writes it in PL/pgSQL, which
-- works the same, one function call more per record.
DO $mig$
-- herald:rest-from 010_partition_of_in_plpgsql_and_batch_handler_by_trigger.down.sql

ALTER TABLE herald.outbox ALTER COLUMN part DROP EXPRESSION;
ALTER TABLE herald.outbox_archive ALTER COLUMN part DROP EXPRESSION;

CREATE FUNCTION herald.outbox_stage() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	NEW.part := herald.outbox_partition_of(NEW.tenant_id, NEW.channel);
	RETURN NEW;
END
$fn$;

CREATE FUNCTION herald.outbox_stage_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	NEW.part := herald.outbox_partition_of(NEW.tenant_id, NEW.channel);
	IF pg_sequence_last_value('herald.outbox_wakeup_until') > 0 THEN
		IF pg_sequence_last_value('herald.outbox_wakeup_until') > (extract(epoch FROM statement_timestamp()) * 1000000)::bigint
			AND coalesce(current_setting('herald.notify', true), '') <> 'off' THEN
			PERFORM pg_notify('herald_outbox', '');
		END IF;
	END IF;
	RETURN NEW;
END
$fn$;

CREATE TRIGGER outbox_part_kept BEFORE UPDATE OF tenant_id, channel, part ON herald.outbox
	FOR EACH ROW EXECUTE FUNCTION herald.outbox_stage();

DO $mig$
BEGIN
	IF EXISTS (SELECT 1 FROM pg_trigger
		WHERE tgrelid = 'herald.outbox'::regclass AND tgname = 'outbox_notify' AND NOT tgisinternal) THEN
		DROP TRIGGER outbox_notify ON herald.outbox;
		CREATE TRIGGER outbox_stage BEFORE INSERT ON herald.outbox
			FOR EACH ROW EXECUTE FUNCTION herald.outbox_stage_notify();
	ELSE
		CREATE TRIGGER outbox_stage BEFORE INSERT ON herald.outbox
			FOR EACH ROW EXECUTE FUNCTION herald.outbox_stage();
	END IF;
END
$mig$;

DROP FUNCTION herald.outbox_notify();
