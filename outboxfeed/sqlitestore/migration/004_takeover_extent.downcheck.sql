-- Migration 3's Workers mark as a takeover only the first batch of a
-- claim whose holder never completed it: migration 4 is reversed only when
-- nothing of such a claim is left to publish.
SELECT 'a claim is open up to seq ' || claim_to || ' (a Worker is running, or stopped without completing it): '
	|| 'stop every Worker; if none runs, start one of this release until herald outbox stats shows no record processing, stop it, and run this again'
FROM outbox_partition WHERE claim_to IS NOT NULL
UNION ALL
SELECT 'records up to seq ' || tk_to || ' may have been published by a Worker that never completed its claim, and the position is ' || pos
	|| ': run a Worker of this release until herald outbox stats says "oldest waiting record: none", stop it, and run this again'
FROM outbox_partition WHERE tk_to > pos
UNION ALL
SELECT count(*) || ' retry-queue record(s) may have been published by a Worker that never completed its claim: '
	|| 'run a Worker of this release until they are dispatched or dead-lettered (herald outbox stats), stop it, and run this again'
FROM outbox_retry WHERE state = 'pending' AND qseq <= (SELECT tk_qto FROM outbox_partition WHERE part = 0)
HAVING count(*) > 0;
