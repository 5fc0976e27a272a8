-- migration 14: the wake-up trigger runs its function only while the
-- wake-up switch's copy (herald.outbox_wakeup_until, migration 13) is
-- not 0. A Worker disarms it, to 0, while records keep coming, and it is
-- 0 until a Worker first arms it; then a producer's INSERT evaluates one
-- comparison in the trigger's WHEN condition and queues no trigger event:
-- no PL/pgSQL call, whose set-up, per transaction, cost each
-- single-record transaction more than the rest of the trigger
-- (docs/performance.md). While the switch holds a time, the function
-- checks it and herald.notify as before; nothing else changes.
--
-- The trigger is Herald's to install or leave out (herald migrate
-- --outbox-notify): it is replaced only where it is installed.

DO $mig$
BEGIN
	IF EXISTS (SELECT 1 FROM pg_trigger
		WHERE tgrelid = 'herald.outbox'::regclass AND tgname = 'outbox_notify' AND NOT tgisinternal) THEN
		DROP TRIGGER outbox_notify ON herald.outbox;
		CREATE TRIGGER outbox_notify AFTER INSERT ON herald.outbox
			FOR EACH STATEMENT WHEN (pg_sequence_last_value('herald.outbox_wakeup_until') > 0)
			EXECUTE FUNCTION herald.outbox_notify();
	END IF;
END
$mig$;
