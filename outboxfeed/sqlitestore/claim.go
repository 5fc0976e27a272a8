package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"

	"github.com/heraldgw/herald/fanout"
)

// The SQLite claim and completion. SQLite has one partition, number 0
// (AnyPartition names it too); each handler has its row for it in
// outbox_partition, which holds the handler's lease (owner, expires_at,
// fence), the position (pos: the last seq completed), the open claim
// (claim_to: the last seq of the batch claimed and not yet completed, NULL
// when none) and the count of consecutive takeovers. Each runs in one
// BEGIN IMMEDIATE transaction: the one writer makes "seq > pos" exactly
// the records not yet read, with no gap a transaction still in flight
// could fill later.

// sqlitePart is SQLite's one partition.
const sqlitePart = 0

// sqlitePartition is the partition's row.
type sqlitePartition struct {
	owner     sql.NullString
	expiresAt sql.NullInt64
	fence     int64
	pos       int64
	claimTo   sql.NullInt64
	takeovers int
	tkTo      int64 // the last seq a holder that never completed may have published
	claimQto  int64 // the last queue row the open claim was handed
	tkQto     int64 // the last queue row a holder that never completed was handed
	active    bool  // the handler is active: only then does it claim
}

// heldBy reports whether owner holds the lease, expired or not (an
// expired lease nobody took over is still its owner's).
func (p *sqlitePartition) heldBy(owner string) bool {
	return p.owner.Valid && p.owner.String == owner
}

// takenAt reports whether someone else holds an unexpired lease at now.
func (p *sqlitePartition) takenAt(owner string, now int64) bool {
	return p.owner.Valid && p.owner.String != owner && p.expiresAt.Int64 > now
}

// errNoPartition: the handler has no partition row (it is unknown, or
// was dropped).
var errNoPartition = errors.New("no partition row")

// readSQLitePartition reads handler's partition row.
func readSQLitePartition(ctx context.Context, tx *sql.Tx, handler string) (sqlitePartition, error) {
	var p sqlitePartition
	err := tx.QueryRowContext(ctx, `SELECT owner, expires_at, fence, pos, claim_to, takeovers, tk_to, claim_qto, tk_qto,
	EXISTS (SELECT 1 FROM outbox_handler h WHERE h.name = p.handler AND h.state = 'active')
FROM outbox_partition p WHERE p.handler = ?1 AND p.part = 0`, handler).Scan(&p.owner, &p.expiresAt, &p.fence, &p.pos,
		&p.claimTo, &p.takeovers, &p.tkTo, &p.claimQto, &p.tkQto, &p.active)
	if errors.Is(err, sql.ErrNoRows) {
		return p, errNoPartition
	}
	return p, err
}

// releaseSQLiteLease gives handler's lease back; the fence stays, so a
// late completion under it still fails (its owner no longer matches).
func releaseSQLiteLease(ctx context.Context, tx *sql.Tx, handler string) error {
	_, err := tx.ExecContext(ctx, `UPDATE outbox_partition SET owner = NULL, expires_at = NULL WHERE handler = ?1 AND part = 0`, handler)
	return err
}

// validateSQLiteClaim checks a ClaimRequest against what SQLite offers.
func validateSQLiteClaim(req outboxfeed.ClaimRequest) error {
	switch {
	case req.Owner == "":
		return errors.New("empty owner")
	case req.Partition != sqlitePart && req.Partition != outboxfeed.AnyPartition:
		return fmt.Errorf("partition %d: SQLite has one partition, 0", req.Partition)
	case req.Limit < 1:
		return fmt.Errorf("limit %d: must be at least 1", req.Limit)
	case req.Lease <= 0:
		return fmt.Errorf("lease %v: must be positive", req.Lease)
	}
	return nil
}

// Claim leases the handler's partition 0 to req.Owner and reads its next
// batch (see sqliteClaim). Arm and Disarm are ignored (wake-ups are
// in-process), and so is Durable: every SQLite commit is as durable as the
// file's synchronous setting makes it.
func (s *Store) Claim(ctx context.Context, req outboxfeed.ClaimRequest) (*outboxfeed.Batch, error) {
	if err := validateSQLiteClaim(req); err != nil {
		return nil, fmt.Errorf("outboxfeed: claim: %w", err)
	}
	var b *outboxfeed.Batch
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		b, err = sqliteClaim(ctx, tx, s.handler, req, time.Now().UnixMicro())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: claim: %w", err)
	}
	return b, nil
}

// sqliteClaim takes the lease when it is free, expired or req.Owner's
// (fence+1; a claim never completed makes this one a takeover), then reads
// the due heads of the retry queue and up to req.Limit records past the
// position, skipping those the queue holds. With nothing to dispatch it
// moves nothing, gives the lease back and returns nil. A handler that is
// not active (paused, disabled or dropped) claims nothing.
func sqliteClaim(ctx context.Context, tx *sql.Tx, handler string, req outboxfeed.ClaimRequest, now int64) (*outboxfeed.Batch, error) {
	p, err := readSQLitePartition(ctx, tx, handler)
	if errors.Is(err, errNoPartition) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if p.takenAt(req.Owner, now) {
		return nil, nil
	}
	if !p.active {
		if p.owner.Valid {
			return nil, releaseSQLiteLease(ctx, tx, handler)
		}
		return nil, nil
	}
	queued, blocked, queueMore, err := sqliteQueueBatch(ctx, tx, handler, now, req.Limit)
	if err != nil {
		return nil, err
	}
	ranged, err := sqliteRangeBatch(ctx, tx, handler, p.pos, req.Limit+1)
	if err != nil {
		return nil, err
	}
	rangeMore := len(ranged) > req.Limit
	if rangeMore {
		ranged = ranged[:req.Limit]
	}
	if len(queued)+len(ranged) == 0 {
		if p.owner.Valid {
			return nil, releaseSQLiteLease(ctx, tx, handler)
		}
		return nil, nil
	}
	last := p.pos
	if len(ranged) > 0 {
		last = ranged[len(ranged)-1].Seq
	}
	b := &outboxfeed.Batch{
		Partition: sqlitePart,
		Owner:     req.Owner,
		Fence:     p.fence + 1,
		Records:   append(queued, ranged...),
		More:      rangeMore || queueMore,
	}
	tkTo, tkQto, claimQto := p.tkTo, p.tkQto, int64(0)
	if p.claimTo.Valid {
		// A claim never completed: its holder may have published any of it.
		b.Takeovers = p.takeovers + 1
		tkTo, tkQto = max(tkTo, p.claimTo.Int64), max(tkQto, p.claimQto)
	}
	// So may it have any record inside a claim taken over before, by
	// whichever Worker it was (the broker keeps each once).
	b.Takeover = b.Takeovers > 0 || len(ranged) > 0 && ranged[0].Seq <= tkTo
	for i := range queued {
		claimQto = max(claimQto, queued[i].Queued)
		b.Takeover = b.Takeover || queued[i].Queued <= tkQto
	}
	if len(blocked) > 0 {
		b.Blocked = blocked
	}
	expires := now + req.Lease.Microseconds()
	if _, err := tx.ExecContext(ctx, `UPDATE outbox_partition
SET owner = ?1, expires_at = ?2, fence = ?3, claim_to = ?4, takeovers = ?5, tk_to = ?6, claim_qto = ?7, tk_qto = ?8
WHERE handler = ?9 AND part = 0`, req.Owner, expires, b.Fence, last, b.Takeovers, tkTo, claimQto, tkQto, handler); err != nil {
		return nil, err
	}
	st := outboxfeed.Processing{LeaseOwner: req.Owner, LeaseExpiresAt: micros(expires), Fence: b.Fence}
	for i := range b.Records {
		r := &b.Records[i]
		r.Fence = b.Fence
		st.Attempt = r.Attempt
		r.State = st
	}
	return b, nil
}

// sqliteQueueHeads lists handler ?1's pending queue rows in qseq order
// (through the partial index: the queue holds only failures and what they
// hold back).
const sqliteQueueHeads = `
SELECT qseq, tenant_id, channel, next_attempt_at FROM outbox_retry INDEXED BY outbox_retry_pending_idx
WHERE handler = ?1 AND state = 'pending' ORDER BY qseq`

// sqliteQueueRows loads the picked queue rows (?1, a JSON array of qseqs)
// of handler ?2.
const sqliteQueueRows = `
SELECT qseq, rec_seq, id, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind, attempt
FROM outbox_retry WHERE qseq IN (SELECT value FROM json_each(?1)) AND handler = ?2 AND state = 'pending'`

// sqliteQueueBatch picks from the retry queue, per channel whose head
// (lowest pending qseq) is due, its pending rows in qseq order up to the
// first one not yet due, sharing limit fairly: each such channel (in the
// order of their heads, at most limit of them) gets up to
// ceil(limit/channels) rows, so one channel's long queue never keeps the
// others waiting and every claim makes progress. It returns them grouped
// by channel (channels in the order of their heads), the channels with a
// pending row it did not take (Batch.Blocked), and whether a due row was
// left for want of room.
func sqliteQueueBatch(ctx context.Context, tx *sql.Tx, handler string, now int64, limit int) ([]outboxfeed.Record, map[fanout.Key]struct{}, bool, error) {
	rows, err := tx.QueryContext(ctx, sqliteQueueHeads, handler)
	if err != nil {
		return nil, nil, false, err
	}
	defer rows.Close()
	var (
		order   []fanout.Key                // channels whose head is due, in head order
		due     = map[fanout.Key][]int64{}  // their due prefix, in qseq order
		blocked = map[fanout.Key]struct{}{} // channels with a row left
		cut     = map[fanout.Key]bool{}     // a row of the channel was not due: stop there
	)
	for rows.Next() {
		var qseq, next int64
		var k fanout.Key
		if err := rows.Scan(&qseq, &k.Tenant, &k.Channel, &next); err != nil {
			return nil, nil, false, err
		}
		switch _, seen := due[k]; {
		case cut[k]:
		case next > now:
			cut[k] = true
			blocked[k] = struct{}{}
		default:
			if !seen {
				order = append(order, k)
			}
			due[k] = append(due[k], qseq)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, false, err
	}
	rows.Close()
	var more bool
	if len(order) > limit {
		for _, k := range order[limit:] {
			blocked[k] = struct{}{}
		}
		order, more = order[:limit], true
	}
	share := max(1, (limit+len(order)-1)/max(1, len(order)))
	var all []int64
	for _, k := range order {
		q := due[k]
		if len(q) > share {
			q, more = q[:share], true
			blocked[k] = struct{}{}
		}
		due[k] = q
		all = append(all, q...)
	}
	if len(all) == 0 {
		return nil, blocked, more, nil
	}
	list, err := json.Marshal(all)
	if err != nil {
		return nil, nil, false, err
	}
	byQseq, err := loadSQLiteQueueRows(ctx, tx, handler, string(list))
	if err != nil {
		return nil, nil, false, err
	}
	out := make([]outboxfeed.Record, 0, len(all))
	for _, k := range order {
		for _, q := range due[k] {
			r, ok := byQseq[q]
			if !ok {
				return nil, nil, false, fmt.Errorf("queue row %d vanished during the claim", q)
			}
			out = append(out, r)
		}
	}
	return out, blocked, more, nil
}

func loadSQLiteQueueRows(ctx context.Context, tx *sql.Tx, handler, qseqs string) (map[int64]outboxfeed.Record, error) {
	rows, err := tx.QueryContext(ctx, sqliteQueueRows, qseqs, handler)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]outboxfeed.Record{}
	for rows.Next() {
		var r outboxfeed.Record
		var payload, freshness string
		var occurred int64
		if err := rows.Scan(&r.Queued, &r.Seq, &r.ID, &r.TenantID, &r.Channel, &r.Type, &r.SchemaVersion,
			&payload, &freshness, &occurred, &r.Kind, &r.Attempt); err != nil {
			return nil, err
		}
		r.Payload, r.Freshness, r.OccurredAt = json.RawMessage(payload), json.RawMessage(freshness), micros(occurred)
		out[r.Queued] = r
	}
	return out, rows.Err()
}

// sqliteRange reads the records past the position (?1), in seq order: a
// rowid range. A record past a handler's position has no row in its retry
// queue (Complete moves the position past every record it queues), except
// those migration 3 queued; while the handler has such rows,
// sqliteRangeQueued reads instead, each record probing the queue's record
// index.
const sqliteRange = `
SELECT o.seq, o.id, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness, o.occurred_at, o.kind
FROM outbox o WHERE o.seq > ?1
ORDER BY o.seq LIMIT ?2`

// sqliteRangeQueued is sqliteRange skipping the records handler ?3's
// retry queue holds.
var sqliteRangeQueued = `
SELECT o.seq, o.id, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness, o.occurred_at, o.kind
FROM outbox o WHERE o.seq > ?1 AND ` + sqliteUnqueued("?3") + `
ORDER BY o.seq LIMIT ?2`

// sqliteQueuedPast reports whether handler ?1's retry queue holds a record
// past its position ?2 (an index seek).
const sqliteQueuedPast = `SELECT EXISTS (SELECT 1 FROM outbox_retry WHERE handler = ?1 AND rec_seq > ?2)`

func sqliteRangeBatch(ctx context.Context, tx *sql.Tx, handler string, pos int64, limit int) ([]outboxfeed.Record, error) {
	var queuedPast bool
	if err := tx.QueryRowContext(ctx, sqliteQueuedPast, handler, pos).Scan(&queuedPast); err != nil {
		return nil, err
	}
	q, args := sqliteRange, []any{pos, limit}
	if queuedPast {
		q, args = sqliteRangeQueued, append(args, handler)
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []outboxfeed.Record
	for rows.Next() {
		var r outboxfeed.Record
		var payload, freshness string
		var occurred int64
		if err := rows.Scan(&r.Seq, &r.ID, &r.TenantID, &r.Channel, &r.Type, &r.SchemaVersion,
			&payload, &freshness, &occurred, &r.Kind); err != nil {
			return nil, err
		}
		r.Payload, r.Freshness, r.OccurredAt = json.RawMessage(payload), json.RawMessage(freshness), micros(occurred)
		out = append(out, r)
	}
	return out, rows.Err()
}

// validateSQLiteComplete checks the arguments of Complete.
func validateSQLiteComplete(b *outboxfeed.Batch, out []outboxfeed.Outcome, next *outboxfeed.ClaimRequest) error {
	switch {
	case b == nil:
		return errors.New("nil batch")
	case b.Partition != sqlitePart:
		return fmt.Errorf("batch of partition %d: SQLite has one partition, 0", b.Partition)
	case len(out) > len(b.Records):
		return fmt.Errorf("%d outcomes for %d records", len(out), len(b.Records))
	}
	for i, o := range out {
		if o.Kind > outboxfeed.OutcomeHold {
			return fmt.Errorf("outcome %d: unknown kind %d", i, o.Kind)
		}
	}
	if next != nil {
		return validateSQLiteClaim(*next)
	}
	return nil
}

// Complete records the outcomes of b's records in one transaction,
// conditional on the partition's owner and fence still being b's. out may
// cover only a prefix of b.Records (the Worker dispatches a shorter batch
// after takeovers): the records past it are left as they were, to be read
// again. The position moves to the last record of the prefix read from the
// position (logged in outbox_batch: a record's dispatched time), and only
// the records not done are written, each into (or within) the retry queue.
// With next it claims again in the same transaction, keeping the lease
// when next is b's owner (next's partition is necessarily 0, b's);
// otherwise the lease is given back.
func (s *Store) Complete(ctx context.Context, b *outboxfeed.Batch, out []outboxfeed.Outcome, next *outboxfeed.ClaimRequest) (bool, *outboxfeed.Batch, error) {
	if err := validateSQLiteComplete(b, out, next); err != nil {
		return false, nil, fmt.Errorf("outboxfeed: complete: %w", err)
	}
	var held bool
	var nb *outboxfeed.Batch
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		held, nb, err = sqliteComplete(ctx, tx, s.handler, b, out, next)
		return err
	})
	if err != nil {
		return false, nil, fmt.Errorf("outboxfeed: complete: %w", err)
	}
	return held, nb, nil
}

// sqliteComplete is Complete's transaction.
func sqliteComplete(ctx context.Context, tx *sql.Tx, handler string, b *outboxfeed.Batch, out []outboxfeed.Outcome,
	next *outboxfeed.ClaimRequest) (held bool, nb *outboxfeed.Batch, err error) {
	p, err := readSQLitePartition(ctx, tx, handler)
	if errors.Is(err, errNoPartition) {
		return false, nil, nil // the handler was dropped: lost
	}
	if err != nil {
		return false, nil, err
	}
	if !p.heldBy(b.Owner) || p.fence != b.Fence {
		return false, nil, nil // lost: change nothing
	}
	held = true
	now := time.Now().UnixMicro()
	end := p.pos
	for i := range out {
		if b.Records[i].Queued == 0 {
			end = b.Records[i].Seq
		}
	}
	if end < p.pos || !p.claimTo.Valid || end > p.claimTo.Int64 {
		return false, nil, fmt.Errorf("batch ends at seq %d, outside the open claim (%d, %d]", end, p.pos, p.claimTo.Int64)
	}
	if end > p.pos {
		if _, err := tx.ExecContext(ctx, `INSERT INTO outbox_batch (handler, part, to_seq, from_seq, fence, done_at)
VALUES (?5, 0, ?1, ?2, ?3, ?4)`, end, p.pos+1, b.Fence, now, handler); err != nil {
			return false, nil, err
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE outbox_partition
SET pos = ?1, claim_to = NULL, done_at = ?2, takeovers = 0 WHERE handler = ?3 AND part = 0`, end, now, handler); err != nil {
		return false, nil, err
	}
	enqueued, err := writeSQLiteOutcomes(ctx, tx, handler, b.Records[:len(out)], out, now)
	if err != nil {
		return false, nil, err
	}
	if b.Takeover && enqueued {
		// Records of a batch taken over may have been published by the
		// holder that never completed: so they are when they leave the
		// queue.
		if _, err := tx.ExecContext(ctx, `UPDATE outbox_partition
SET tk_qto = max(tk_qto, (SELECT max(qseq) FROM outbox_retry WHERE handler = ?1)) WHERE handler = ?1 AND part = 0`, handler); err != nil {
			return false, nil, err
		}
	}
	if next == nil || next.Owner != b.Owner {
		if err := releaseSQLiteLease(ctx, tx, handler); err != nil {
			return false, nil, err
		}
	}
	if next != nil {
		nb, err = sqliteClaim(ctx, tx, handler, *next, now)
	}
	return held, nb, err
}

// sqliteOutcome is one record's write in writeSQLiteOutcomes, a JSON
// object of sqliteEnqueue's or sqliteRequeue's array.
type sqliteOutcome struct {
	Seq     int64   `json:"q"`           // the record's seq, or its queue row's qseq
	Kind    string  `json:"k,omitempty"` // requeue: done, retry or dead
	State   string  `json:"s,omitempty"` // enqueue: the row's state
	Attempt int     `json:"a"`
	Next    int64   `json:"n"`
	Err     *string `json:"e"`
	Dead    *int64  `json:"d"`
}

// sqliteEnqueue copies the records read from the position (?2: the
// sqliteOutcome array, in the batch's order, which becomes their order in
// the queue) into handler ?1's retry queue with the states their outcomes
// give them.
const sqliteEnqueue = `
INSERT INTO outbox_retry (handler, rec_seq, id, tenant_id, channel, type, schema_version, payload, freshness,
	occurred_at, kind, state, attempt, next_attempt_at, last_error, dead_lettered_at)
SELECT ?1, o.seq, o.id, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness, o.occurred_at, o.kind,
	json_extract(x.value, '$.s'), json_extract(x.value, '$.a'), json_extract(x.value, '$.n'),
	json_extract(x.value, '$.e'), json_extract(x.value, '$.d')
FROM json_each(?2) x JOIN outbox o ON o.seq = json_extract(x.value, '$.q')
ORDER BY x.key`

// sqliteRequeue writes the outcomes of handler ?1's queue rows (?2: the
// sqliteOutcome array; ?3: now): done rows are dispatched, retried ones
// wait again, dead ones are dead letters. Each row is found by its qseq
// (the unary + keeps the planner from scanning the handler's rows).
const sqliteRequeue = `
UPDATE outbox_retry AS r SET
	state = CASE json_extract(x.value, '$.k') WHEN 'done' THEN 'dispatched' WHEN 'dead' THEN 'dead_letter' ELSE 'pending' END,
	attempt = CASE json_extract(x.value, '$.k') WHEN 'done' THEN r.attempt ELSE r.attempt + 1 END,
	next_attempt_at = CASE json_extract(x.value, '$.k') WHEN 'retry' THEN json_extract(x.value, '$.n') ELSE r.next_attempt_at END,
	last_error = CASE json_extract(x.value, '$.k') WHEN 'done' THEN r.last_error ELSE json_extract(x.value, '$.e') END,
	dispatched_at = CASE json_extract(x.value, '$.k') WHEN 'done' THEN ?3 ELSE r.dispatched_at END,
	dead_lettered_at = CASE json_extract(x.value, '$.k') WHEN 'dead' THEN ?3 ELSE r.dead_lettered_at END
FROM json_each(?2) x
WHERE r.qseq = json_extract(x.value, '$.q') AND +r.handler = ?1 AND r.state = 'pending'`

// writeSQLiteOutcomes writes what became of recs, where anything needs
// writing, in two statements: a record read from the position gets a queue
// row unless it was done; a queue row is updated unless it was held. It
// reports whether it queued a record read from the position.
func writeSQLiteOutcomes(ctx context.Context, tx *sql.Tx, handler string, recs []outboxfeed.Record, out []outboxfeed.Outcome, now int64) (bool, error) {
	var enq, req []sqliteOutcome
	for i, o := range out {
		r := &recs[i]
		var lastErr *string
		if o.Kind == outboxfeed.OutcomeRetryLater || o.Kind == outboxfeed.OutcomeDeadLettered {
			e := storekit.TruncateError(o.Err)
			lastErr = &e
		}
		if r.Queued == 0 {
			w := sqliteOutcome{Seq: r.Seq, State: outboxfeed.StatePending, Attempt: r.Attempt + 1, Next: now + o.Delay.Microseconds(), Err: lastErr}
			switch o.Kind {
			case outboxfeed.OutcomeDone:
				continue
			case outboxfeed.OutcomeHold:
				w.Attempt, w.Next = r.Attempt, now
			case outboxfeed.OutcomeDeadLettered:
				w.State, w.Next, w.Dead = outboxfeed.StateDeadLetter, now, &now
			}
			enq = append(enq, w)
			continue
		}
		w := sqliteOutcome{Seq: r.Queued, Next: now + o.Delay.Microseconds(), Err: lastErr}
		switch o.Kind {
		case outboxfeed.OutcomeDone:
			w.Kind = "done"
		case outboxfeed.OutcomeRetryLater:
			w.Kind = "retry"
		case outboxfeed.OutcomeDeadLettered:
			w.Kind = "dead"
		case outboxfeed.OutcomeHold:
			continue // keeps its row, its place and its attempts
		}
		req = append(req, w)
	}
	if len(enq) > 0 {
		list, err := json.Marshal(enq)
		if err != nil {
			return false, err
		}
		res, err := tx.ExecContext(ctx, sqliteEnqueue, handler, string(list))
		if err != nil {
			return false, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return false, err
		} else if n != int64(len(enq)) {
			return false, fmt.Errorf("queued %d of %d records: the others are gone from the outbox", n, len(enq))
		}
	}
	if len(req) > 0 {
		list, err := json.Marshal(req)
		if err != nil {
			return false, err
		}
		if _, err := tx.ExecContext(ctx, sqliteRequeue, handler, string(list), now); err != nil {
			return false, err
		}
	}
	return len(enq) > 0, nil
}

// CompleteMany completes cs and then claims with next, in one transaction
// (outboxfeed.Store). SQLite has one partition, so next claims it only
// when no completion went on with it and nobody else holds it.
func (s *Store) CompleteMany(ctx context.Context, cs []outboxfeed.Completion, next *outboxfeed.ClaimRequest) ([]bool, []*outboxfeed.Batch, error) {
	goOns := make([]*outboxfeed.ClaimRequest, len(cs))
	for i, c := range cs {
		if c.GoOn && next != nil {
			r := *next
			r.Partition, r.Owner = c.Batch.Partition, c.Batch.Owner
			goOns[i] = &r
		}
		if err := validateSQLiteComplete(c.Batch, c.Out, goOns[i]); err != nil {
			return nil, nil, fmt.Errorf("outboxfeed: complete: %w", err)
		}
	}
	if next != nil {
		if err := validateSQLiteClaim(*next); err != nil {
			return nil, nil, fmt.Errorf("outboxfeed: claim: %w", err)
		}
	}
	var held []bool
	var nbs []*outboxfeed.Batch
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		held, nbs = make([]bool, len(cs)), nil
		for i, c := range cs {
			h, nb, err := sqliteComplete(ctx, tx, s.handler, c.Batch, c.Out, goOns[i])
			if err != nil {
				return err
			}
			held[i] = h
			if nb != nil {
				nbs = append(nbs, nb)
			}
		}
		if next == nil {
			return nil
		}
		p, err := readSQLitePartition(ctx, tx, s.handler)
		switch {
		case errors.Is(err, errNoPartition):
			return nil
		case err != nil:
			return err
		case p.owner.Valid && p.expiresAt.Int64 > time.Now().UnixMicro():
			return nil // held: by a completion that went on with it, or by someone else
		}
		nb, err := sqliteClaim(ctx, tx, s.handler, *next, time.Now().UnixMicro())
		if nb != nil {
			nbs = append(nbs, nb)
		}
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("outboxfeed: complete: %w", err)
	}
	return held, nbs, nil
}
