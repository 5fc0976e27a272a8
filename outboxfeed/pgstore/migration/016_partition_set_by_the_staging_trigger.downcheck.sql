-- Migration 16 is reversed only when making part a generated column again
-- leaves every record in its partition: no change of the partition count
-- is in progress, and no retained record (archived ones included) was
-- staged under an earlier partition count.
SELECT 'a change of the partition count is in progress (herald outbox partitions): let the Workers complete it, then wait until retention has dropped the records staged under the earlier count'
WHERE EXISTS (SELECT 1 FROM herald.outbox_partition WHERE state IN ('retiring', 'waiting'))
UNION ALL
SELECT format('%s retained records, staged from %s to %s, are in partitions of an earlier partition count, which herald.outbox_partition_of no longer gives: wait until retention has dropped them, or set the older release up anew instead (docs/runbooks/rollback-schema.md)',
	count(*), min(o.occurred_at), max(o.occurred_at))
FROM herald.outbox_all o
WHERE o.part <> herald.outbox_partition_of(o.tenant_id, o.channel)
HAVING count(*) > 0;
