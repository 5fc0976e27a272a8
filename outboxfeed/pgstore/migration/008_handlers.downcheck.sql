-- Migration 8 is reversed only when realtime is the sole handler (the
-- schema before it has one consumer) and no Worker of this release holds
-- a lease.
SELECT format('handler %s (%s) exists: migration 7 has one consumer only; remove it from the config and run herald handlers drop --yes %s first (its undelivered records are then not delivered to it)',
	h.name, h.type, h.name)
FROM herald.outbox_handler h WHERE h.name <> 'realtime'
UNION ALL
SELECT format('partition %s of handler %s is leased to %s until %s: stop every Worker of this release (herald feed, and herald serve without --feed=false), or wait until the lease ends',
	p.part, p.handler, p.owner, p.expires_at)
FROM herald.outbox_partition p
WHERE p.owner IS NOT NULL AND p.expires_at > now();
