-- Migration 7 is reversed only once no Worker of this release holds a
-- lease: its completions call the function the reversal replaces.
SELECT format('partition %s is leased to %s until %s: stop every Worker of this release (herald feed, and herald serve without --feed=false), or wait until the lease ends',
	p.part, p.owner, p.expires_at)
FROM herald.outbox_partition p
WHERE p.owner IS NOT NULL AND p.expires_at > now()
ORDER BY p.part;
