-- migration 12: a record's kind and schema version are checked by the
-- Worker, as its type and freshness are since migration 9. Their two CHECK
-- constraints cost each producer's insert about a fifth of the statement's
-- backend CPU: PostgreSQL builds a constraint's expression again for
-- every INSERT statement (docs/performance.md), more than evaluating it.
-- They duplicate what stage.Stage checks before the insert and what the
-- Worker now checks before it publishes: a record staged by plain SQL with
-- a kind outside the four or a schema_version below 1 commits and is
-- dead-lettered at once (attempt 1) with the reason in last_error.
-- herald.stage_notification, the SQL producers' function, refuses a
-- schema_version below 1 with the error the constraint gave
-- (check_violation), as stage.Stage does in Go (its kind is always
-- notification).
--
-- A segment is made with LIKE herald.outbox INCLUDING CONSTRAINTS and
-- then attached, so it holds the constraints as its own as well as
-- inherited: dropping them from herald.outbox would leave them on the
-- segments already made (and migration 9's on those of its day). They go
-- from every segment, of the outbox and of its archive, too.

ALTER TABLE herald.outbox DROP CONSTRAINT outbox_kind, DROP CONSTRAINT outbox_schema_version_positive;
ALTER TABLE herald.outbox_archive DROP CONSTRAINT outbox_kind, DROP CONSTRAINT outbox_schema_version_positive;

DO $mig$
DECLARE
	seg regclass;
BEGIN
	FOR seg IN SELECT i.inhrelid::regclass FROM pg_inherits i
		WHERE i.inhparent IN ('herald.outbox'::regclass, 'herald.outbox_archive'::regclass) LOOP
		EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS outbox_kind, DROP CONSTRAINT IF EXISTS outbox_schema_version_positive,
			DROP CONSTRAINT IF EXISTS outbox_type_format, DROP CONSTRAINT IF EXISTS outbox_freshness_mode', seg);
	END LOOP;
END
$mig$;

-- herald.stage_notification gains the check, after the type's: the
-- function is rewritten from its own definition (migration 9's).
DO $mig$
DECLARE
	fn regprocedure := 'herald.stage_notification(text, text, text, int, jsonb, uuid, jsonb)';
	was text := $was$
	IF freshness IS NOT NULL AND NOT$was$;
	becomes text := $now$
	IF NOT schema_version >= 1 THEN
		RAISE check_violation USING MESSAGE = format('stage_notification: schema_version %s: want 1 or more', schema_version);
	END IF;
	IF freshness IS NOT NULL AND NOT$now$;
BEGIN
	IF position(was IN (SELECT prosrc FROM pg_proc WHERE oid = fn)) = 0 THEN
		RAISE EXCEPTION 'migration 12: % is not the one migration 9 wrote', fn;
	END IF;
	EXECUTE replace(pg_get_functiondef(fn), was, becomes);
END
$mig$;
