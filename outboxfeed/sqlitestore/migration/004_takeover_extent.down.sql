-- migration 4 reversed: the partition row forgets the extent of a
-- takeover. The down check has made sure no extent is left to keep:
-- no claim open, the position past every seq a holder that never
-- completed may have published, and no pending retry-queue row it may
-- have been handed. Nothing else changed, so nothing moves.

ALTER TABLE outbox_partition DROP COLUMN tk_qto;
ALTER TABLE outbox_partition DROP COLUMN claim_qto;
ALTER TABLE outbox_partition DROP COLUMN tk_to;
