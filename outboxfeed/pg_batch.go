package outboxfeed

import (
	"context"
	"fmt"
	"strconv"

	"github.com/heraldgw/herald/fanout"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// pgClaimSQL reads herald.outbox_claim; xid8 travels as text.
const pgClaimSQL = `SELECT r_kind, r_part, r_fence, r_takeovers, r_qseq, r_attempt, r_due,
	r_id::text, r_seq, r_xid::text, r_tenant, r_channel, r_type, r_version, r_payload, r_freshness, r_occurred, r_kind2
FROM herald.outbox_claim($1, $2, $3, $4, $5)`

// pgClaimTries bounds how many partitions with work one claim leases in
// turn before it gives up (each is tried at most once anyway).
const pgClaimTries = 64

const (
	// pgCycleSettings apply to a claim's or completion's transaction: its
	// commit mode ($1: off, or on for Durable), and an end to it should the
	// Worker freeze (SIGSTOP, a VM pause) in the middle of sending it: the
	// server ends the session after this long idle in the transaction, so
	// the partition's row is free for a takeover once the lease expires.
	pgCycleSettings = `SELECT set_config('synchronous_commit', $1, true),
	set_config('idle_in_transaction_session_timeout', '5s', true)`
	// The wake-up switch is a hint: a Worker never waits for another
	// one's lock on it (one frozen mid-transaction would stall them all).
	pgArm = `UPDATE herald.outbox_wakeup SET armed_until = statement_timestamp() + $1::bigint * interval '1 microsecond'
	WHERE id IN (SELECT id FROM herald.outbox_wakeup FOR UPDATE SKIP LOCKED)`
	pgDisarm = `UPDATE herald.outbox_wakeup SET armed_until = NULL
	WHERE id IN (SELECT id FROM herald.outbox_wakeup WHERE armed_until IS NOT NULL FOR UPDATE SKIP LOCKED)`
)

// queueClaim adds req's statements (wake-up switch, claim) to b; the
// claim's result is the last of them.
func queueClaim(b *pgx.Batch, req *ClaimRequest) {
	switch {
	case req.Disarm:
		b.Queue(pgDisarm)
	case req.Arm > 0:
		b.Queue(pgArm, req.Arm.Microseconds())
	}
	part := req.Partition
	if part < 0 {
		part = -1
	}
	b.Queue(pgClaimSQL, part, req.Owner, req.Lease, req.Limit, pgClaimTries)
}

// Claim leases a partition and reads its next batch, in one round trip.
func (s *PGStore) Claim(ctx context.Context, req ClaimRequest) (*Batch, error) {
	var b pgx.Batch
	b.Queue(pgCycleSettings, commitMode(req.Durable))
	queueClaim(&b, &req)
	res := s.pool.SendBatch(ctx, &b)
	nb, err := readClaim(res, b.Len(), &req)
	if cerr := res.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: claim: %w", err)
	}
	return nb, nil
}

// readClaim reads the results of a batch whose last of n statements is a
// claim.
func readClaim(res pgx.BatchResults, n int, req *ClaimRequest) (*Batch, error) {
	for range n - 1 {
		if _, err := res.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := res.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanClaim(rows, req)
}

// pgClaimRowTargets are the scan targets of one claim row, reused across
// the claim's rows.
type pgClaimRowTargets struct {
	kind                     byte
	part, takeovers, attempt int32
	fence                    int64
	qseq, seq                pgtype.Int8
	due                      pgtype.Bool
	id, xid, channel         pgtype.Text
	tenant, typ, kind2       internedText
	version                  pgtype.Int4
	payload, freshness       []byte
	occurred                 pgtype.Timestamptz
	dest                     []any
}

func newPGClaimRowTargets() *pgClaimRowTargets {
	t := &pgClaimRowTargets{}
	strs := make(map[string]string, 8)
	for _, it := range []*internedText{&t.tenant, &t.typ, &t.kind2} {
		it.table = strs
	}
	t.dest = []any{&t.kind, &t.part, &t.fence, &t.takeovers, &t.qseq, &t.attempt, &t.due,
		&t.id, &t.seq, &t.xid, &t.tenant, &t.channel, &t.typ, &t.version, &t.payload, &t.freshness, &t.occurred, &t.kind2}
	return t
}

// scanClaim builds the batch from herald.outbox_claim's rows (none: nothing
// was claimed).
func scanClaim(rows pgx.Rows, req *ClaimRequest) (*Batch, error) {
	var b *Batch
	t := newPGClaimRowTargets()
	type head struct {
		due    bool
		queued int64
	}
	var heads map[fanout.Key]head
	var queued []Record
	var ranged []Record
	if req.full {
		// A Record is large: growing the slice to a full batch would
		// allocate and copy it twice over.
		ranged = make([]Record, 0, req.Limit+1)
	}
	for rows.Next() {
		if err := rows.Scan(t.dest...); err != nil {
			return nil, err
		}
		if b == nil {
			b = &Batch{Partition: int(t.part), Owner: req.Owner, Fence: t.fence, Takeovers: int(t.takeovers),
				Takeover: t.takeovers > 0, durable: req.Durable}
		}
		if t.kind == 'h' {
			if heads == nil {
				heads = make(map[fanout.Key]head)
			}
			heads[fanout.Key{Tenant: t.tenant.s, Channel: t.channel.String}] = head{due: t.due.Bool, queued: t.qseq.Int64}
			continue
		}
		if !t.id.Valid || !t.seq.Valid || !t.tenant.valid || !t.channel.Valid || !t.typ.valid || !t.version.Valid ||
			!t.occurred.Valid || !t.kind2.valid {
			return nil, fmt.Errorf("%w: NULL column in claimed record %s", ErrCorruptRecord, t.id.String)
		}
		r := Record{
			ID: t.id.String, Seq: t.seq.Int64, TenantID: t.tenant.s, Channel: t.channel.String,
			Type: t.typ.s, SchemaVersion: int(t.version.Int32),
			Payload: append([]byte(nil), t.payload...), Freshness: append([]byte(nil), t.freshness...),
			OccurredAt: t.occurred.Time, Kind: t.kind2.s, Attempt: int(t.attempt), Fence: t.fence,
			jsonPayload: true,
		}
		if t.kind == 'q' {
			r.queued = t.qseq.Int64
			queued = append(queued, r)
			continue
		}
		x, err := strconv.ParseUint(t.xid.String, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: xid %q of record %s", ErrCorruptRecord, t.xid.String, r.ID)
		}
		r.xid = x
		ranged = append(ranged, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if b == nil {
		return nil, nil
	}
	if len(ranged) > req.Limit {
		ranged, b.More = ranged[:req.Limit], true
	}
	taken := make(map[fanout.Key]int64, len(heads))
	for i := range queued {
		taken[keyOf(&queued[i])]++
	}
	for k, h := range heads {
		if !h.due || taken[k] < h.queued {
			if b.Blocked == nil {
				b.Blocked = make(map[fanout.Key]struct{})
			}
			b.Blocked[k] = struct{}{}
		}
	}
	b.Records = ranged
	if len(queued) > 0 {
		b.Records = append(queued, ranged...)
	}
	for i := range b.Records {
		b.Records[i].State = Processing{LeaseOwner: b.Owner, Fence: b.Fence, Attempt: b.Records[i].Attempt}
	}
	return b, nil
}

// pgCompleteSQL calls herald.outbox_complete.
const pgCompleteSQL = `SELECT herald.outbox_complete($1, $2, $3, $4, $5::text::xid8, $6, $7,
	$8, $9::text[]::xid8[], $10, $11, $12, $13, $14, $15, $16, $17, $18)`

// completeArgs are herald.outbox_complete's arguments for b and out.
func completeArgs(b *Batch, out []Outcome) []any {
	var lastXID *string
	var lastSeq *int64
	var seqs, qseqs, delays, qdelays []int64
	var states, errs, qstates, qerrs, xids []string
	var attempts, qattempts []int32
	for i := range out {
		r, o := &b.Records[i], out[i]
		if r.queued == 0 {
			x := strconv.FormatUint(r.xid, 10)
			lastXID, lastSeq = &x, &b.Records[i].Seq
		}
		state, attempt := "", int32(r.Attempt)
		switch o.Kind {
		case OutcomeDone:
			if r.queued == 0 {
				continue
			}
			state = StateDispatched
		case OutcomeRetryLater:
			state, attempt = StatePending, attempt+1
		case OutcomeDeadLettered:
			state, attempt = StateDeadLetter, attempt+1
		case OutcomeHold:
			if r.queued != 0 {
				continue // it keeps its row as it is
			}
			state = StatePending
		}
		if r.queued != 0 {
			qseqs, qstates, qattempts = append(qseqs, r.queued), append(qstates, state), append(qattempts, attempt)
			qdelays, qerrs = append(qdelays, o.Delay.Microseconds()), append(qerrs, truncateError(o.Err))
			continue
		}
		seqs, states, attempts = append(seqs, r.Seq), append(states, state), append(attempts, attempt)
		xids = append(xids, strconv.FormatUint(r.xid, 10))
		delays, errs = append(delays, o.Delay.Microseconds()), append(errs, truncateError(o.Err))
	}
	rangeDone := len(out) == len(b.Records) && !b.More
	return []any{b.Partition, b.Owner, b.Fence, rangeDone, lastXID, lastSeq, len(out),
		nonNil(seqs), nonNil(xids), nonNil(states), nonNil(attempts), nonNil(delays), nullIfEmpty(errs),
		nonNil(qseqs), nonNil(qstates), nonNil(qattempts), nonNil(qdelays), nullIfEmpty(qerrs)}
}

// nonNil turns a nil slice into an empty one (an empty array, not NULL).
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// nullIfEmpty is errs with "" as NULL (no last_error).
func nullIfEmpty(errs []string) []*string {
	out := make([]*string, len(errs))
	for i := range errs {
		if errs[i] != "" {
			out[i] = &errs[i]
		}
	}
	return out
}

// Complete writes b's outcomes and, with next, claims again, in one round
// trip and one transaction.
func (s *PGStore) Complete(ctx context.Context, b *Batch, out []Outcome, next *ClaimRequest) (bool, *Batch, error) {
	if len(out) > len(b.Records) {
		return false, nil, fmt.Errorf("%w: %d outcomes for %d records", ErrInvalidConfig, len(out), len(b.Records))
	}
	var pb pgx.Batch
	pb.Queue(pgCycleSettings, commitMode(b.durable))
	pb.Queue(pgCompleteSQL, completeArgs(b, out)...)
	if next != nil {
		queueClaim(&pb, next)
	}
	res := s.pool.SendBatch(ctx, &pb)
	held, nb, err := func() (bool, *Batch, error) {
		if _, err := res.Exec(); err != nil {
			return false, nil, err
		}
		var held bool
		if err := res.QueryRow().Scan(&held); err != nil {
			return false, nil, err
		}
		if next == nil {
			return held, nil, nil
		}
		n := 1
		if next.Disarm || next.Arm > 0 {
			n = 2
		}
		nb, err := readClaim(res, n, next)
		return held, nb, err
	}()
	if cerr := res.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return false, nil, fmt.Errorf("outboxfeed: complete: %w", err)
	}
	return held, nb, nil
}

// commitMode is synchronous_commit for a cycle's transaction.
func commitMode(durable bool) string {
	if durable {
		return "on"
	}
	return "off"
}
