-- migration 14 reversed: the wake-up trigger, where it is installed, runs
-- its function for every INSERT statement again: it is made again from
-- its own definition without the WHEN condition. The function is
-- unchanged, so what it sends is the same.

DO $mig$
DECLARE
	def text := (SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t
		WHERE t.tgrelid = 'herald.outbox'::regclass AND t.tgname = 'outbox_notify' AND NOT t.tgisinternal);
BEGIN
	IF def IS NULL THEN
		RETURN;
	END IF;
	IF def !~ ' WHEN \(.*\) EXECUTE ' THEN
		RAISE EXCEPTION 'migration 14 down: the wake-up trigger is not the one migration 14 made: %', def;
	END IF;
	DROP TRIGGER outbox_notify ON herald.outbox;
	EXECUTE regexp_replace(def, ' WHEN \(.*\) EXECUTE ', ' EXECUTE ');
END
$mig$;
