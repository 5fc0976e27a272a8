-- migration 13: the wake-up trigger reads whether a Worker has armed it
-- from a sequence instead of a table. The trigger runs for every INSERT
-- statement into herald.outbox; its look at herald.outbox_wakeup was a
-- query (a plan, a snapshot, a scan of the one-row table) and cost a
-- producer's insert more than the rest of the trigger. A sequence's value
-- is read by a function, without a query: pg_sequence_last_value.
--
-- herald.outbox_wakeup stays the switch Workers write (arm, disarm), in
-- every release: a trigger on it copies armed_until, in microseconds since
-- the Unix epoch (0: disarmed), into herald.outbox_wakeup_until as the
-- writing transaction commits. It is a deferred constraint trigger, so the
-- copy is made after the rest of that transaction, holding the row's lock:
-- two Workers' copies land in the order of their commits. A sequence is
-- not transactional: a copy made by a commit that then fails (rare) stays;
-- armed, producers send a NOTIFY no one needed until the arming lapses;
-- disarmed, a waiting Worker finds the records at its next poll and arms
-- again, as a lost NOTIFY leaves it (NOTIFY is only a hint).
--
-- Roles that read herald.outbox_wakeup (producers: the trigger runs as
-- the inserting role) may read the sequence.

CREATE SEQUENCE herald.outbox_wakeup_until MINVALUE 0 NO CYCLE;
SELECT setval('herald.outbox_wakeup_until',
	coalesce((SELECT (extract(epoch FROM w.armed_until) * 1000000)::bigint FROM herald.outbox_wakeup w), 0), true);

DO $mig$
DECLARE
	grantee text;
BEGIN
	FOR grantee IN SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END
		FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
		WHERE c.oid = 'herald.outbox_wakeup'::regclass AND a.privilege_type = 'SELECT' LOOP
		EXECUTE format('GRANT SELECT ON SEQUENCE herald.outbox_wakeup_until TO %s', grantee);
	END LOOP;
END
$mig$;

CREATE FUNCTION herald.outbox_wakeup_copy() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	PERFORM setval('herald.outbox_wakeup_until', coalesce((extract(epoch FROM NEW.armed_until) * 1000000)::bigint, 0), true);
	RETURN NULL;
END
$fn$;
CREATE CONSTRAINT TRIGGER outbox_wakeup_copy AFTER INSERT OR UPDATE ON herald.outbox_wakeup
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION herald.outbox_wakeup_copy();

CREATE OR REPLACE FUNCTION herald.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	IF pg_sequence_last_value('herald.outbox_wakeup_until') > (extract(epoch FROM statement_timestamp()) * 1000000)::bigint
		AND coalesce(current_setting('herald.notify', true), '') <> 'off' THEN
		PERFORM pg_notify('herald_outbox', '');
	END IF;
	RETURN NULL;
END
$fn$;
