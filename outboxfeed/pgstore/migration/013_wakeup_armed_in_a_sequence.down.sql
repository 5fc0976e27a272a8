-- migration 13 reversed: the wake-up trigger looks at herald.outbox_wakeup
-- again (migration 7's function), which Workers have kept writing; the
-- sequence and the trigger that copied the switch into it go.

CREATE OR REPLACE FUNCTION herald.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
-- herald:rest-from 007_takeover_marks_in_the_queue_and_notify_off.up.sql
DROP TRIGGER outbox_wakeup_copy ON herald.outbox_wakeup;
DROP FUNCTION herald.outbox_wakeup_copy();
DROP SEQUENCE herald.outbox_wakeup_until;
