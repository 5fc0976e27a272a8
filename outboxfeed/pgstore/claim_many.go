package pgstore

import (
	"context"
	"fmt"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/jackc/pgx/v5"
)

// pgClaimManySQL leases up to $6 partitions of handler $1 that have work
// and that nobody holds, in one statement: the candidates are found as the
// claim of any partition finds them (an idle partition costs index probes,
// no write) and locked at once, skipping those another claim holds, so two
// Workers' statements never wait for each other's rows in turn. Each
// partition's rows come together ($2 owner, $3 lease, $4 limit, $5 range
// limit).
//
// A partition in the common state (active, no range open, nothing in its
// retry queue, no repartition under way) is read and leased by the
// statement itself, in plain SQL: its range ends at the statement's
// snapshot, and its records are read in that same snapshot, so the range
// holds exactly what the snapshot shows past its start; one whose read
// comes back empty is left as it was. That is sound only if the row the
// statement locked is the version its snapshot saw, so that the start of
// the range (lo) precedes the snapshot: a row another transaction updated
// and committed after the snapshot was taken is locked in its latest
// version (READ COMMITTED rechecks the candidate's conditions on it), and
// a tuple id does not tell the two apart (a TID scan's recheck accepts any
// version), so the statement compares the locked version's xmin with the
// xmin of the version its snapshot reads: equal only for the same version.
// Any other candidate goes through herald.outbox_claim, which takes its
// snapshot after the lock. So does a claim that finds a change of the
// partition count at its end (the new partitions waiting, none retiring
// any more): herald.outbox_claim makes them active as it starts, and a
// Worker whose lanes all claim through this statement (the lead lane,
// while the others rest) would not call it otherwise
// (TestPostgresRepartitionCompletesWithoutPolls).
//
// The transactions open at a range's start (the xip of lo) are read one
// xid at a time (readOpenByXid), from a column of f, not from
// ARRAY(SELECT pg_snapshot_xip(f.lo)) in the read: as an index condition
// under the lateral join, that sub-select was evaluated for the first
// partition only and its array reused for the next ones
// (TestPostgresClaimManyReadsTransactionsOpenAtTheRangesStart).
const pgClaimManySQL = `WITH w AS MATERIALIZED (
	SELECT p.part, p.lo, p.state, p.open, p.hi IS NULL AND p.pos_seq = 0 AS fresh, p.xmin AS vx
	FROM herald.outbox_partition p
	WHERE p.handler = $1 AND p.state IN ('active', 'retiring') AND (p.owner IS NULL OR p.expires_at < clock_timestamp())
		AND (p.open OR p.hi IS NOT NULL OR p.state = 'retiring'
			OR EXISTS (SELECT 1 FROM herald.outbox o WHERE o.part = p.part AND (o.xid, o.seq) >= (pg_snapshot_xmax(p.lo), 0))
			OR EXISTS (SELECT 1 FROM pg_snapshot_xip(p.lo) AS x(xid)
				CROSS JOIN LATERAL (SELECT 1 FROM herald.outbox o WHERE o.part = p.part AND o.xid = x.xid OFFSET 0) o)
			OR EXISTS (SELECT 1 FROM herald.outbox_retry r WHERE r.handler = $1 AND r.part = p.part AND r.state = 'pending'
				AND r.next_attempt_at <= now()))
	ORDER BY p.claimed_at NULLS FIRST, p.part LIMIT $6 FOR UPDATE SKIP LOCKED),
f AS MATERIALIZED (
	SELECT w.part, w.lo, ARRAY(SELECT pg_snapshot_xip(w.lo)) AS xip FROM w JOIN herald.outbox_partition q ON q.handler = $1 AND q.part = w.part AND q.xmin = w.vx
	WHERE w.state = 'active' AND NOT w.open AND w.fresh
		AND NOT EXISTS (SELECT 1 FROM herald.outbox_retry r WHERE r.handler = $1 AND r.part = w.part AND r.state = 'pending')
		AND EXISTS (SELECT 1 FROM herald.outbox_handler h WHERE h.name = $1 AND h.state = 'active')
		AND NOT EXISTS (SELECT 1 FROM herald.outbox_partition x WHERE x.handler = $1 AND x.state IN ('waiting', 'retiring'))),
recs AS MATERIALIZED (
	SELECT o.* FROM f CROSS JOIN LATERAL (
		(SELECT o.* FROM unnest(f.xip) AS x(xid)
			CROSS JOIN LATERAL (SELECT * FROM herald.outbox o WHERE o.part = f.part AND o.xid = x.xid OFFSET 0) o)
		UNION ALL
		(SELECT o.* FROM herald.outbox o WHERE o.part = f.part AND o.xid >= pg_snapshot_xmax(f.lo))
		LIMIT $5 + 1) o),
upd AS (
	UPDATE herald.outbox_partition p SET owner = $2, expires_at = clock_timestamp() + $3, fence = p.fence + 1, takeovers = 0,
		open = true, claim_qto = 0, hi = pg_current_snapshot(), claimed_at = clock_timestamp()
	FROM f WHERE p.handler = $1 AND p.part = f.part AND EXISTS (SELECT 1 FROM recs o WHERE o.part = f.part)
	RETURNING p.part, p.fence, p.tk_range, p.tk_qseq)
SELECT 'r'::"char", u.part, u.fence, 0, NULL::bigint, 0, true, o.id::text, o.seq, o.xid::text,
	o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness, o.occurred_at, o.kind, u.tk_range, u.tk_qseq
FROM upd u JOIN recs o ON o.part = u.part
UNION ALL
SELECT c.r_kind, c.r_part, c.r_fence, c.r_takeovers, c.r_qseq, c.r_attempt, c.r_due,
	c.r_id::text, c.r_seq, c.r_xid::text, c.r_tenant, c.r_channel, c.r_type, c.r_version, c.r_payload, c.r_freshness,
	c.r_occurred, c.r_kind2, c.r_tk, c.r_tkq
FROM (SELECT w.part FROM w WHERE NOT EXISTS (SELECT 1 FROM f WHERE f.part = w.part)
	UNION ALL
	SELECT -1 WHERE EXISTS (SELECT 1 FROM herald.outbox_partition x WHERE x.handler = $1 AND x.state = 'waiting')
		AND NOT EXISTS (SELECT 1 FROM herald.outbox_partition x WHERE x.handler = $1 AND x.state = 'retiring')) t
CROSS JOIN LATERAL herald.outbox_claim($1, t.part, $2, $3, $4, 1, $5) c`

// manyStep is how CompleteMany reads one completion's results.
type manyStep struct {
	advance bool // its partition in pgAdvanceSQL
	keep    bool // pgCompleteSQL, then pgKeepSQL
	claim   bool // pgCompleteSQL, then a claim of the partition
	goOn    *outboxfeed.ClaimRequest
}

// CompleteMany completes cs and claims next in one round trip and one
// transaction (outboxfeed.Store). A completion that goes on in its
// partition with every record done and its range finished advances it in
// one statement (pgAdvanceSQL, one for all of them, sent first); a
// partition that statement leaves to the
// general path (a retry queue, a retiring partition) takes one more round
// trip. The new partitions come from pgClaimManySQL.
func (s *Store) CompleteMany(ctx context.Context, cs []outboxfeed.Completion, next *outboxfeed.ClaimRequest) ([]bool, []*outboxfeed.Batch, error) {
	for _, c := range cs {
		if c.Batch == nil || len(c.Out) > len(c.Batch.Records) {
			return nil, nil, fmt.Errorf("outboxfeed: complete: %w: a completion without its batch, or with more outcomes than records", outboxfeed.ErrInvalidConfig)
		}
	}
	durable := next != nil && next.Durable
	for _, c := range cs {
		durable = durable || state(c.Batch).durable
	}
	var pb pgx.Batch
	pb.Queue(pgCycleSettings, commitMode(durable))
	if next != nil {
		queueWakeup(&pb, next)
	}
	steps := make([]manyStep, len(cs))
	var adv []int // the completions that advance
	for i, c := range cs {
		b := c.Batch
		var goOn *outboxfeed.ClaimRequest
		if c.GoOn && next != nil {
			r := *next
			r.Partition, r.Owner, r.Arm, r.Disarm = b.Partition, b.Owner, 0, false
			goOn = &r
		}
		steps[i] = manyStep{goOn: goOn, advance: advances(b, c.Out, goOn)}
		if steps[i].advance {
			adv = append(adv, i)
		}
	}
	if len(adv) > 0 {
		parts, owners, fences := make([]int32, len(adv)), make([]string, len(adv)), make([]int64, len(adv))
		lastSeqs, counts := make([]*int64, len(adv)), make([]int32, len(adv))
		for j, i := range adv {
			b := cs[i].Batch
			parts[j], owners[j], fences[j], lastSeqs[j], counts[j] = int32(b.Partition), b.Owner, b.Fence, lastSeqOf(b), int32(len(b.Records))
		}
		goOn := steps[adv[0]].goOn
		pb.Queue(pgAdvanceSQL, s.handler, parts, owners, fences, goOn.Lease, lastSeqs, counts, claimRangeRecords(goOn), goOn.Hold)
	}
	for i, c := range cs {
		b, st := c.Batch, &steps[i]
		if st.advance {
			continue
		}
		pb.Queue(pgCompleteSQL, completeArgs(s.handler, b, c.Out)...)
		switch {
		case keeps(b, c.Out, st.goOn):
			st.keep = true
			pb.Queue(pgKeepSQL, s.handler, b.Partition, b.Owner, st.goOn.Lease, b.Fence)
		case st.goOn != nil:
			st.claim = true
			pb.Queue(pgClaimSQL, s.handler, b.Partition, st.goOn.Owner, st.goOn.Lease, st.goOn.Limit, pgClaimTries, claimRangeRecords(st.goOn))
		}
	}
	// The claim of further partitions is left out after a step that kept
	// every partition and found none free (pgAdvanceSQL's 'n' row) when
	// this one again only goes on with them: it would only start its plan.
	claimMore := next != nil && !(next.Hold && len(adv) > 0 && len(adv) == len(cs) && s.aloneAt(next.Owner))
	if claimMore {
		pb.Queue(pgClaimManySQL, s.handler, next.Owner, next.Lease, next.Limit, claimRangeRecords(next), max(next.Spread, 1))
	}
	var noneFree bool
	held := make([]bool, len(cs))
	goneOn := make([]*outboxfeed.Batch, len(cs))
	general := make([]bool, len(cs)) // advance left it to the general path
	var claimed []*outboxfeed.Batch
	res := s.pool.SendBatch(ctx, &pb)
	err := func() error {
		for range 1 + wakeupsOf(next) {
			if _, err := res.Exec(); err != nil {
				return err
			}
		}
		if len(adv) > 0 {
			rows, err := res.Query()
			if err != nil {
				return err
			}
			noneFree, err = scanAdvances(rows, cs, steps, adv, held, goneOn, general)
			rows.Close()
			if err != nil {
				return err
			}
		}
		for i, st := range steps {
			c := cs[i]
			if st.advance {
				continue
			}
			if err := res.QueryRow().Scan(&held[i]); err != nil {
				return err
			}
			var nb *outboxfeed.Batch
			var err error
			switch {
			case st.keep:
				nb, err = readKeep(res, c.Batch, c.Out, st.goOn)
			case st.claim:
				nb, err = readClaim(res, 1, st.goOn, nil)
			}
			if err != nil {
				return err
			}
			goneOn[i] = nb
		}
		if claimMore {
			rows, err := res.Query()
			if err != nil {
				return err
			}
			defer rows.Close()
			claimed, err = scanClaims(rows, next)
			return err
		}
		return nil
	}()
	if cerr := res.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if next != nil {
		s.setAlone(next.Owner, err == nil && noneFree)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("outboxfeed: complete: %w", err)
	}
	// The general path of the partitions pgAdvanceSQL left to it (it
	// changed nothing of them).
	for i, g := range general {
		if !g {
			continue
		}
		h, nb, err := s.Complete(ctx, cs[i].Batch, cs[i].Out, steps[i].goOn)
		if err != nil {
			return nil, nil, err
		}
		held[i], goneOn[i] = h, nb
	}
	var nbs []*outboxfeed.Batch
	for i, nb := range goneOn {
		if nb == nil {
			continue
		}
		if state(nb).runs.pending {
			if err := s.readRuns(ctx, nb, steps[i].goOn); err != nil {
				return nil, nil, fmt.Errorf("outboxfeed: complete: %w", err)
			}
		}
		nbs = append(nbs, nb)
	}
	for _, nb := range claimed {
		if state(nb).runs.pending {
			if err := s.readRuns(ctx, nb, next); err != nil {
				return nil, nil, fmt.Errorf("outboxfeed: complete: %w", err)
			}
		}
		nbs = append(nbs, nb)
	}
	return held, nbs, nil
}

// scanAdvances reads pgAdvanceSQL's rows for the completions adv (of cs,
// steps) into held, goneOn and general: a partition with a lease row 'l'
// went on (a batch when its range had records) or was given back, 'e' was
// kept with an empty range (a batch of no records), 'g' is left to the
// general path, and one without a row lost its lease. It reports the 'n'
// row: the step kept every partition and found none free.
func scanAdvances(rows pgx.Rows, cs []outboxfeed.Completion, steps []manyStep, adv []int, held []bool, goneOn []*outboxfeed.Batch, general []bool) (noneFree bool, err error) {
	byPart := make(map[int32]int, len(adv))
	for _, i := range adv {
		byPart[int32(cs[i].Batch.Partition)] = i
	}
	builders := make(map[int]*claimBuilder, len(adv))
	t := newPGClaimRowTargets()
	for rows.Next() {
		if err := rows.Scan(t.dest...); err != nil {
			return false, err
		}
		if t.kind == 'n' {
			noneFree = true
			continue
		}
		i, ok := byPart[t.part]
		if !ok {
			return false, fmt.Errorf("%w: an advance returned partition %d, which it was not given", outboxfeed.ErrCorruptRecord, t.part)
		}
		switch t.kind {
		case 'l':
			held[i] = true
		case 'e':
			// Kept with an empty range (Hold): a batch of no records.
			req := steps[i].goOn
			held[i] = true
			goneOn[i] = &outboxfeed.Batch{Partition: int(t.part), Owner: req.Owner, Fence: t.fence, Driver: &pgBatch{durable: req.Durable}}
		case 'g':
			general[i] = true
		default:
			c := builders[i]
			if c == nil {
				c = &claimBuilder{req: steps[i].goOn}
				builders[i] = c
			}
			if err := c.add(t); err != nil {
				return false, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	for i, c := range builders {
		goneOn[i] = c.finish()
	}
	return noneFree, nil
}

// aloneAt reports whether owner's last step kept every partition it went
// on with and found no other partition of the handler free to claim.
func (s *Store) aloneAt(owner string) bool {
	_, ok := s.alone.Load(aloneKey{s.handler, owner})
	return ok
}

// setAlone records what owner's last step found (aloneAt).
func (s *Store) setAlone(owner string, alone bool) {
	if alone {
		s.alone.Store(aloneKey{s.handler, owner}, struct{}{})
		return
	}
	s.alone.Delete(aloneKey{s.handler, owner})
}

// aloneKey names a holder of one handler's partitions (aloneAt).
type aloneKey struct{ handler, owner string }

// lastSeqOf is the seq of b's last record (nil: b has none).
func lastSeqOf(b *outboxfeed.Batch) *int64 {
	if n := len(b.Records); n > 0 {
		return &b.Records[n-1].Seq
	}
	return nil
}

// wakeupsOf is wakeups(req), 0 without a request.
func wakeupsOf(req *outboxfeed.ClaimRequest) int {
	if req == nil {
		return 0
	}
	return wakeups(req)
}
