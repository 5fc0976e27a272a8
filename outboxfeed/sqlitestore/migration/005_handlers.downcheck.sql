-- Migration 5 is reversed only when realtime is the sole handler (the
-- schema before it has one consumer).
SELECT 'handler ' || name || ' (' || type || ') exists: migration 4 has one consumer only; remove it from the config and run herald handlers drop --yes ' || name || ' first (its undelivered records are then not delivered to it)'
FROM outbox_handler WHERE name <> 'realtime' ORDER BY name;
