-- migration 15: herald.outbox loses its id index; herald.outbox_archive
-- keeps its own. Producers' inserts paid for a B-tree entry per record
-- (4–5 % of a business transaction's backend instructions,
-- docs/performance.md) that only operators' look-ups by id read (herald
-- outbox get, through herald.outbox_records): claims and the Worker go by
-- (part, xid, seq). A segment about to be archived gets the index built
-- first, out of the move's transaction (the Pruner does it), so archived
-- records, the retention's bulk, are looked up by index; a look-up of a
-- record still in herald.outbox (the segments not yet archived) reads
-- those segments.

DROP INDEX herald.outbox_id_idx;
