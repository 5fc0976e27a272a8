-- migration 15 reversed: herald.outbox has its id index again, built on
-- every segment that has none (herald.outbox is locked while it is
-- built); nothing moves.

CREATE INDEX outbox_id_idx ON herald.outbox (id);
