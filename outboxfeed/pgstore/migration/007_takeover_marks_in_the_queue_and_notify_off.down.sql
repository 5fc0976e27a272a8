-- migration 7 reversed: the functions of migration 6 again.
--
-- Migration 7 changed two functions and no table, so nothing moves:
--
--   - outbox_complete loses p_takeover. The marks migration 7 added
--     (tk_qseq over the retry-queue rows a taken-over batch put there) stay
--     in the partition rows, where migration 6's claim reads them, so those
--     rows still leave the queue as a takeover.
--   - outbox_notify sends the NOTIFY whatever herald.notify says: a producer
--     that commits in two phases must stop relying on
--     SET LOCAL herald.notify = off first (or the trigger be dropped, with
--     herald migrate --outbox-notify=false), or its PREPARE TRANSACTION fails.

DROP FUNCTION herald.outbox_complete(int, text, bigint, boolean, boolean, bigint, int,
	bigint[], xid8[], text[], int[], bigint[], text[], bigint[], text[], int[], bigint[], text[]);
CREATE FUNCTION herald.outbox_complete(p_part int, p_owner text, p_fence bigint, p_range_done boolean,
-- herald:rest-from 006_ranges_in_staging_order.up.sql

CREATE OR REPLACE FUNCTION herald.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
-- herald:rest-from 001_outbox.up.sql
