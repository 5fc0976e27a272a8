-- migration 4 keeps the extent of a claim taken over from a holder
-- that never completed it (tk_to: the last seq that holder may have
-- published; tk_qto: the last retry-queue row it may have been handed,
-- claim_qto being that of the open claim), so every batch inside it is
-- published as a takeover, whichever Worker goes on
-- (fanout.Fence.Takeover).

ALTER TABLE outbox_partition ADD COLUMN tk_to INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outbox_partition ADD COLUMN claim_qto INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outbox_partition ADD COLUMN tk_qto INTEGER NOT NULL DEFAULT 0;
