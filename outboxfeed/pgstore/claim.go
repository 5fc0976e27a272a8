package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"

	"github.com/heraldgw/herald/fanout"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// pgClaimSQL reads herald.outbox_claim; xid8 travels as text.
const pgClaimSQL = `SELECT r_kind, r_part, r_fence, r_takeovers, r_qseq, r_attempt, r_due,
	r_id::text, r_seq, r_xid::text, r_tenant, r_channel, r_type, r_version, r_payload, r_freshness, r_occurred, r_kind2, r_tk, r_tkq
FROM herald.outbox_claim($1, $2, $3, $4, $5, $6, $7)`

// pgClaimTries bounds how many partitions with work one claim leases in
// turn before it gives up (each is tried at most once anyway).
const pgClaimTries = 64

const (
	// pgCycleSettings apply to a claim's or completion's transaction: its
	// commit mode ($1: off, or on for Durable), and an end to it should the
	// Worker freeze (SIGSTOP, a VM pause) in the middle of sending it: the
	// server ends the session after this long idle in the transaction, so
	// the partition's row is free for a takeover once the lease expires.
	// Sequential and bitmap scans are off too: a range is read through
	// the index, in its order (the claim functions set both themselves;
	// pgAdvanceSQL is a plain statement, whose generic plan would
	// otherwise read the whole table for a range bound it cannot
	// estimate). Plans are generic: a claim's statements (and the claim
	// functions' own) run thousands of times a second with a small
	// LIMIT (claimRangeRecords), whose custom plans PostgreSQL costs far
	// below the generic one and so would plan anew at every call, which
	// cost a cycle several times its execution.
	pgCycleSettings = `SELECT set_config('synchronous_commit', $1, true),
	set_config('idle_in_transaction_session_timeout', '5s', true),
	set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)`
	// The wake-up switch is a hint: a Worker never waits for another
	// one's lock on it (one frozen mid-transaction would stall them all).
	pgArm = `UPDATE herald.outbox_wakeup SET armed_until = statement_timestamp() + $1::bigint * interval '1 microsecond'
	WHERE id IN (SELECT id FROM herald.outbox_wakeup FOR UPDATE SKIP LOCKED)`
	pgDisarm = `UPDATE herald.outbox_wakeup SET armed_until = NULL
	WHERE id IN (SELECT id FROM herald.outbox_wakeup WHERE armed_until IS NOT NULL FOR UPDATE SKIP LOCKED)`
	// pgKeepSQL renews the lease of the partition whose batch the same
	// transaction completed (herald.outbox_keep).
	pgKeepSQL = `SELECT r_fence, r_tk, r_tenant, r_channel FROM herald.outbox_keep($1, $2, $3, $4, $5)`
	// pgRunsSQL reads the runs of a range too large to hold.
	pgRunsSQL = `SELECT r_xid::text, r_from, r_to, r_n FROM herald.outbox_range_runs($1, $2, $3)`
	// pgReadRunsSQL reads the records of runs, in seq order.
	pgReadRunsSQL = `SELECT r_id::text, r_seq, r_xid::text, r_tenant, r_channel, r_type, r_version, r_payload, r_freshness,
	r_occurred, r_kind2 FROM herald.outbox_read_runs($1, $2::text[]::xid8[], $3, $4, $5)`
)

// pgReadRangeSQL reads the records of the range of partition $2 of
// handler $1 past its position, up to $5 of them, under the lease of $3
// with fence $4 (none once it is lost), in index order: the read of a
// range larger than its claim statement reads (claimRangeRecords). It is
// one plain statement whose rows stream to the Worker as the index scan
// finds them; the claim functions return theirs through plpgsql's RETURN
// QUERY (or a materialized CTE), which stores the whole result before it
// sends the first row and costs PostgreSQL about twice as much per record.
// The transactions open at the range's start (the xip of lo) are read by
// index, one lookup per xid (readOpenByXid).
const pgReadRangeSQL = `WITH l AS MATERIALIZED (
	SELECT p.part, p.lo, p.hi, p.pos_seq, ARRAY(SELECT pg_snapshot_xip(p.lo)) AS xip FROM herald.outbox_partition p
	WHERE p.handler = $1 AND p.part = $2 AND p.owner = $3 AND p.fence = $4 AND p.open AND p.hi IS NOT NULL)
SELECT o.id::text, o.seq, o.xid::text, o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness,
	o.occurred_at, o.kind
FROM l CROSS JOIN LATERAL (
	(SELECT o.* FROM unnest(l.xip) AS x(xid) CROSS JOIN LATERAL (SELECT * FROM herald.outbox o WHERE o.part = l.part
		AND o.xid = x.xid AND o.seq > l.pos_seq AND pg_visible_in_snapshot(o.xid, l.hi) OFFSET 0) o)
	UNION ALL
	(SELECT o.* FROM herald.outbox o WHERE o.part = l.part AND o.xid >= pg_snapshot_xmax(l.lo) AND o.xid < pg_snapshot_xmax(l.hi)
		AND o.seq > l.pos_seq AND pg_visible_in_snapshot(o.xid, l.hi))
	LIMIT $5) o`

// readOpenByXid: how the statements read the records of the
// transactions open at a range's start: a lookup of the (part, xid, seq)
// index per xid, in a lateral subquery the planner cannot flatten (OFFSET
// 0). As one condition xid = ANY (list), the generic plan of a segment
// without statistics took the list as a filter and read every record of
// the partition retained in that segment, on every cycle
// (TestPostgresOpenTransactionsReadOneAtATime); as a lateral join without
// OFFSET 0, the planner flattened it into a join that read the whole
// partition (migration 11). The claim functions read them so from schema
// 17.

// pgReadSettings are pgReadRangeSQL's: the range is read through the
// index, in its order.
const pgReadSettings = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)`

// holdLimit is req's RangeLimit or its default: how many records of a
// range a claim reads and holds at once (a larger range is read in runs).
func holdLimit(req *outboxfeed.ClaimRequest) int {
	if req.RangeLimit > 0 {
		return req.RangeLimit
	}
	return outboxfeed.DefaultRangeRecords
}

// claimRangeRecords is how many of a range's records the statement that
// claims (or goes on in) a partition reads itself: the backlog threshold
// of req's batch (outboxfeed.BacklogRecords, or a sixteenth of Limit when
// that is fewer), at most holdLimit. A range of more, a backlog, is read
// right after by pgReadRangeSQL (readRange); what the claim read of it
// (that many records and one) is read again there.
func claimRangeRecords(req *outboxfeed.ClaimRequest) int {
	return min(holdLimit(req), max(1, min(outboxfeed.BacklogRecords, req.Limit/16)))
}

// pgBatch is the store's own state of a claim (outboxfeed.Batch.Driver):
// the claim's commit mode, the rest of the range it read, in seq order
// (in chunks, none empty), and the runs of a range too large to hold. A
// completion whose next claim is the same partition's goes on with them
// under a renewed lease instead of reading the range again.
type pgBatch struct {
	durable bool
	rest    [][]outboxfeed.Record
	runs    pgRuns
}

// state is b's pgBatch, made on first use.
func state(b *outboxfeed.Batch) *pgBatch {
	if p, ok := b.Driver.(*pgBatch); ok {
		return p
	}
	p := &pgBatch{}
	b.Driver = p
	return p
}

// queueClaim adds req's statements (wake-up switch, claim) to b; the
// claim's result is the last of them.
func queueClaim(b *pgx.Batch, handler string, req *outboxfeed.ClaimRequest) {
	queueWakeup(b, req)
	part := req.Partition
	if part < 0 {
		part = -1
	}
	b.Queue(pgClaimSQL, handler, part, req.Owner, req.Lease, req.Limit, pgClaimTries, claimRangeRecords(req))
}

// queueWakeup adds req's statement on the wake-up switch to b, if any
// (wakeups counts it).
func queueWakeup(b *pgx.Batch, req *outboxfeed.ClaimRequest) {
	switch {
	case req.Disarm:
		b.Queue(pgDisarm)
	case req.Arm > 0:
		b.Queue(pgArm, req.Arm.Microseconds())
	}
}

// Claim leases a partition and reads its next batch, in one round trip (a
// range too large to hold takes two more, to read its runs).
func (s *Store) Claim(ctx context.Context, req outboxfeed.ClaimRequest) (*outboxfeed.Batch, error) {
	var b pgx.Batch
	b.Queue(pgCycleSettings, commitMode(req.Durable))
	queueClaim(&b, s.handler, &req)
	res := s.pool.SendBatch(ctx, &b)
	nb, err := readClaim(res, b.Len(), &req, nil)
	if cerr := res.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil && nb != nil && state(nb).runs.pending {
		err = s.readRuns(ctx, nb, &req)
	}
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: claim: %w", err)
	}
	return nb, nil
}

// readClaim reads the results of a batch whose last of n statements is a
// claim (herald.outbox_claim, or pgAdvanceSQL: the kind of its lease row
// goes to *lease).
func readClaim(res pgx.BatchResults, n int, req *outboxfeed.ClaimRequest, lease *byte) (*outboxfeed.Batch, error) {
	rows, err := queryLast(res, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanClaim(rows, req, lease)
}

// queryLast reads the results of a batch of n statements and returns the
// rows of the last, a query.
func queryLast(res pgx.BatchResults, n int) (pgx.Rows, error) {
	for range n - 1 {
		if _, err := res.Exec(); err != nil {
			return nil, err
		}
	}
	return res.Query()
}

// scanRecords hands each record of rows (pgReadRunsSQL's or
// pgReadRangeSQL's columns) to add, until add returns false.
func scanRecords(rows pgx.Rows, add func(outboxfeed.Record) bool) error {
	t := newPGClaimRowTargets()
	t.kind = 'r'
	dest := []any{&t.id, &t.seq, &t.xid, &t.tenant, &t.channel, &t.typ, &t.version, &t.payload, &t.freshness, &t.occurred, &t.kind2}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		r, err := t.record()
		if err != nil {
			return err
		}
		if !add(r) {
			return nil
		}
	}
	return rows.Err()
}

// pgClaimRowTargets are the scan targets of one claim row, reused across
// the claim's rows.
type pgClaimRowTargets struct {
	kind                     byte
	part, takeovers, attempt int32
	fence, tkq               int64
	qseq, seq                pgtype.Int8
	due, tk                  pgtype.Bool
	id                       pgtype.Text
	xid                      xidText
	tenant, typ, kind2       internedText
	channel                  internedText
	version                  pgtype.Int4
	payload, freshness       keptBytes
	occurred                 pgtype.Timestamptz
	dest                     []any
	slab                     []byte // the claim's payloads (keep)
}

// maxInternedChannels bounds a claim's table of channel names: a range
// holds up to RangeRecords records, many of them on the same channels.
const maxInternedChannels = 4096

// A claim copies its payloads into blocks instead of one allocation per
// record: the first of firstSlabBytes, each next one twice the last, up to
// slabBytes (a payload of more than a quarter of that gets its own). A
// claim at a steady flow holds one to a few records, and a block of
// slabBytes each was most of what a busy process allocated, and so of its
// garbage collection (docs/performance.md).
const (
	firstSlabBytes = 1 << 10
	slabBytes      = 32 << 10
)

// keptBytes scans a column straight from the driver's memory into its
// claim's slab (keep).
type keptBytes struct {
	t *pgClaimRowTargets
	v []byte
}

// ScanBytes implements pgtype.BytesScanner; v is the driver's memory.
func (k *keptBytes) ScanBytes(v []byte) error {
	k.v = k.t.keep(v)
	return nil
}

// keep copies v (the driver's memory) into the claim's slab; the copy's
// capacity ends with it, so appending to one never touches another.
func (t *pgClaimRowTargets) keep(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	if len(v) > slabBytes/4 {
		return append([]byte(nil), v...)
	}
	if cap(t.slab)-len(t.slab) < len(v) {
		n := max(firstSlabBytes, min(2*cap(t.slab), slabBytes))
		for n < len(v) {
			n *= 2
		}
		t.slab = make([]byte, 0, n)
	}
	i := len(t.slab)
	t.slab = append(t.slab, v...)
	return t.slab[i:len(t.slab):len(t.slab)]
}

func newPGClaimRowTargets() *pgClaimRowTargets {
	t := &pgClaimRowTargets{}
	// The tables grow with what a claim reads: one at a steady flow reads
	// a few records, and sized ahead they were a fifth of what a busy
	// process allocated.
	strs := make(map[string]string)
	for _, it := range []*internedText{&t.tenant, &t.typ, &t.kind2} {
		it.table = strs
	}
	t.channel.table, t.channel.limit = make(map[string]string), maxInternedChannels
	t.payload.t, t.freshness.t = t, t
	t.dest = []any{&t.kind, &t.part, &t.fence, &t.takeovers, &t.qseq, &t.attempt, &t.due,
		&t.id, &t.seq, &t.xid, &t.tenant, &t.channel, &t.typ, &t.version, &t.payload, &t.freshness, &t.occurred, &t.kind2, &t.tk, &t.tkq}
	return t
}

// record builds the claimed record of the current row.
func (t *pgClaimRowTargets) record() (outboxfeed.Record, error) {
	if !t.id.Valid || !t.seq.Valid || !t.tenant.valid || !t.channel.valid || !t.typ.valid || !t.version.Valid ||
		!t.occurred.Valid || !t.kind2.valid {
		return outboxfeed.Record{}, fmt.Errorf("%w: NULL column in claimed record %s", outboxfeed.ErrCorruptRecord, t.id.String)
	}
	r := outboxfeed.Record{
		ID: t.id.String, Seq: t.seq.Int64, TenantID: t.tenant.s, Channel: t.channel.s,
		Type: t.typ.s, SchemaVersion: int(t.version.Int32),
		Payload: t.payload.v, Freshness: t.freshness.v,
		OccurredAt: t.occurred.Time, Kind: t.kind2.s, Attempt: int(t.attempt), Fence: t.fence,
		PayloadIsJSON: true,
	}
	if t.kind == 'q' {
		r.Queued = t.qseq.Int64
		return r, nil
	}
	if !t.xid.valid {
		return outboxfeed.Record{}, fmt.Errorf("%w: xid %q of record %s", outboxfeed.ErrCorruptRecord, t.xid.bad, r.ID)
	}
	r.TxID = t.xid.x
	return r, nil
}

// xidText scans an xid8 sent as text into a number, without keeping the
// text (one string less per claimed record).
type xidText struct {
	x     uint64
	valid bool
	bad   string // the text when it is not an xid (for the error)
}

// ScanBytes implements pgtype.BytesScanner; v is the driver's memory.
func (t *xidText) ScanBytes(v []byte) error {
	t.x, t.valid, t.bad = 0, false, ""
	if v == nil {
		return nil // NULL: a queued record's row (or corrupt, reported by record)
	}
	x, ok := parseXID(v)
	if !ok {
		t.bad = string(v)
		return nil
	}
	t.x, t.valid = x, true
	return nil
}

// parseXID parses a decimal uint64 (strconv.ParseUint without the
// conversion to a string).
func parseXID(v []byte) (uint64, bool) {
	if len(v) == 0 || len(v) > 20 {
		return 0, false
	}
	var x uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if x > (math.MaxUint64-d)/10 {
			return 0, false
		}
		x = x*10 + d
	}
	return x, true
}

// gather collects a claim's range records in chunks of a batch (the
// first one grows to it as a slice does, for small claims): a range can
// hold RangeRecords (100,000 by default) records, and growing one slice
// to that size, or joining the chunks into one, allocates, clears and
// copies megabytes the batches handed out one at a time do not need; a
// chunk is freed once its batch is.
type gather struct {
	chunks [][]outboxfeed.Record // full ones
	cur    []outboxfeed.Record
	n      int
	limit  int // a chunk's size
}

func (g *gather) add(r outboxfeed.Record) {
	if len(g.cur) == g.limit {
		// Exactly a batch each, so that batches never straddle two.
		g.chunks = append(g.chunks, g.cur)
		g.cur = make([]outboxfeed.Record, 0, g.limit)
	}
	g.cur = append(g.cur, r)
	g.n++
}

// inSeqOrder returns the records gathered in seq order, in chunks: as
// they are when they came so (one transaction after another), else
// joined and sorted.
func (g *gather) inSeqOrder() [][]outboxfeed.Record {
	cs := append(g.chunks, g.cur)
	sorted := true
	for i, c := range cs {
		if !slices.IsSortedFunc(c, bySeq) || i > 0 && len(c) > 0 && cs[i-1][len(cs[i-1])-1].Seq > c[0].Seq {
			sorted = false
			break
		}
	}
	if sorted {
		return cs
	}
	all := make([]outboxfeed.Record, 0, g.n)
	for _, c := range cs {
		all = append(all, c...)
	}
	slices.SortFunc(all, bySeq)
	return [][]outboxfeed.Record{all}
}

// scanClaim builds the batch from herald.outbox_claim's rows (none: nothing
// was claimed), or pgAdvanceSQL's: the kind of their lease row ('l' or
// 'g') goes to *lease.
func scanClaim(rows pgx.Rows, req *outboxfeed.ClaimRequest, lease *byte) (*outboxfeed.Batch, error) {
	t := newPGClaimRowTargets()
	c := claimBuilder{req: req}
	for rows.Next() {
		if err := rows.Scan(t.dest...); err != nil {
			return nil, err
		}
		if t.kind == 'l' || t.kind == 'g' {
			*lease = t.kind
			continue
		}
		if err := c.add(t); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return c.finish(), nil
}

// scanClaims builds the batches of several partitions' claims from rows
// of herald.outbox_claim's columns (pgClaimManySQL), one a partition, in
// the order their partitions first came.
func scanClaims(rows pgx.Rows, req *outboxfeed.ClaimRequest) ([]*outboxfeed.Batch, error) {
	t := newPGClaimRowTargets()
	var cs []*claimBuilder
	byPart := make(map[int32]*claimBuilder, 4)
	for rows.Next() {
		if err := rows.Scan(t.dest...); err != nil {
			return nil, err
		}
		c := byPart[t.part]
		if c == nil {
			c = &claimBuilder{req: req}
			byPart[t.part] = c
			cs = append(cs, c)
		}
		if err := c.add(t); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	bs := make([]*outboxfeed.Batch, 0, len(cs))
	for _, c := range cs {
		if b := c.finish(); b != nil {
			bs = append(bs, b)
		}
	}
	return bs, nil
}

// claimHead is a channel's retry queue as a claim's 'h' row gives it.
type claimHead struct {
	due    bool
	queued int64
}

// claimBuilder builds one partition's batch from a claim's rows.
type claimBuilder struct {
	req    *outboxfeed.ClaimRequest
	b      *outboxfeed.Batch
	heads  map[fanout.Key]claimHead
	queued []outboxfeed.Record
	ranged gather
	tkq    int64
}

// add takes the row t holds.
func (c *claimBuilder) add(t *pgClaimRowTargets) error {
	if c.b == nil {
		c.b = &outboxfeed.Batch{Partition: int(t.part), Owner: c.req.Owner, Fence: t.fence, Takeovers: int(t.takeovers),
			Takeover: t.takeovers > 0 || t.tk.Bool, Driver: &pgBatch{durable: c.req.Durable}}
		c.ranged.limit = max(c.req.Limit, 1)
	}
	c.tkq = t.tkq
	if t.kind == 'h' {
		if c.heads == nil {
			c.heads = make(map[fanout.Key]claimHead)
		}
		c.heads[fanout.Key{Tenant: t.tenant.s, Channel: t.channel.s}] = claimHead{due: t.due.Bool, queued: t.qseq.Int64}
		return nil
	}
	r, err := t.record()
	if err != nil {
		return err
	}
	if t.kind == 'q' {
		c.queued = append(c.queued, r)
	} else {
		c.ranged.add(r)
	}
	return nil
}

// finish returns the batch (nil: no rows, nothing was claimed).
func (c *claimBuilder) finish() *outboxfeed.Batch {
	b, queued := c.b, c.queued
	if b == nil {
		return nil
	}
	taken := make(map[fanout.Key]int64, len(c.heads))
	for i := range queued {
		taken[queued[i].Key()]++
	}
	for k, h := range c.heads {
		if !h.due || taken[k] < h.queued {
			block(b, k)
		}
	}
	for i := range queued {
		if queued[i].Queued <= c.tkq {
			// A queue row handed to a holder that never completed: it may
			// be published already (the broker keeps it once).
			b.Takeover = true
			break
		}
	}
	if c.ranged.n > claimRangeRecords(c.req) {
		// More than the claim statement reads: read right after it
		// (readRuns: the whole range, or, too large to hold, in runs).
		state(b).runs.pending = true
		state(b).runs.whole = claimRangeRecords(c.req) < holdLimit(c.req)
		b.Records = queued
		b.More = true
		setState(b)
		return b
	}
	b.Records = queued
	hand(b, c.ranged.inSeqOrder(), c.req.Limit)
	return b
}

// block marks channel k blocked (Batch.Blocked).
func block(b *outboxfeed.Batch, k fanout.Key) {
	if b.Blocked == nil {
		b.Blocked = make(map[fanout.Key]struct{})
	}
	b.Blocked[k] = struct{}{}
}

// hand appends up to limit of ranged (in seq order, in chunks) to
// b.Records (after its queued records) and keeps the rest for the next
// batch of the range (sharing ranged's arrays: a batch within one chunk
// is not copied).
func hand(b *outboxfeed.Batch, ranged [][]outboxfeed.Record, limit int) {
	for len(ranged) > 0 && len(ranged[0]) == 0 {
		ranged = ranged[1:]
	}
	var first []outboxfeed.Record // what is left of ranged[0]
	switch {
	case len(ranged) == 0:
	case len(b.Records) == 0 && (len(ranged[0]) >= limit || len(ranged) == 1):
		n := min(len(ranged[0]), limit)
		b.Records, first = ranged[0][:n:n], ranged[0][n:]
	default:
		first = ranged[0]
		for taken := 0; taken < limit; {
			n := min(len(first), limit-taken)
			b.Records, first = append(b.Records, first[:n]...), first[n:]
			taken += n
			if len(first) > 0 || len(ranged) == 1 {
				break
			}
			ranged, first = ranged[1:], ranged[1]
		}
	}
	// A new list: the one handed in may be another batch's.
	var rest [][]outboxfeed.Record
	if len(first) > 0 {
		rest = append(rest, first)
	}
	if len(ranged) > 1 {
		rest = append(rest, ranged[1:]...)
	}
	state(b).rest = rest
	b.More = len(rest) > 0 || state(b).runs.left()
	setState(b)
}

// setState marks b's records as processing under its lease.
//
// The records never attempted before (nearly all) share one State: an
// interface holding a struct is a copy no one can change, and boxing it
// once saves an allocation per record.
func setState(b *outboxfeed.Batch) {
	var first outboxfeed.State // Attempt 0
	for i := range b.Records {
		r := &b.Records[i]
		r.Fence = b.Fence
		if r.Attempt != 0 {
			r.State = outboxfeed.Processing{LeaseOwner: b.Owner, Fence: b.Fence, Attempt: r.Attempt}
			continue
		}
		if first == nil {
			first = outboxfeed.Processing{LeaseOwner: b.Owner, Fence: b.Fence}
		}
		r.State = first
	}
}

// bySeq orders records of one range in staging order. They come from
// the index in (xid, seq) order, mostly sorted already.
func bySeq(a, b outboxfeed.Record) int { return cmp.Compare(a.Seq, b.Seq) }

// pgRun is a run of one transaction's consecutive records of a range (in
// seq order): seq from..to, n records.
type pgRun struct {
	xid      uint64
	from, to int64
	n        int
}

// pgRuns are the runs of a range too large to hold, in seq order.
type pgRuns struct {
	pending bool // runs must be read (from the range past the position)
	// whole: the range is larger than its claim statement read
	// (claimRangeRecords); readRuns reads it whole first (readRange), and
	// in runs only when it is larger than the Worker holds.
	whole bool
	list  []pgRun // read, not yet handed out
	more  bool    // the range has runs past list
}

// left reports whether the range has records past what was handed out.
func (r *pgRuns) left() bool { return r.pending || len(r.list) > 0 || r.more }

// readRuns reads, for b's range too large to hold, its runs past the
// position (when b has none left) and the records of the next Limit of
// them, which it appends to b.Records.
func (s *Store) readRuns(ctx context.Context, b *outboxfeed.Batch, req *outboxfeed.ClaimRequest) error {
	if state(b).runs.whole {
		state(b).runs.whole = false
		held, err := s.readRange(ctx, b, req)
		if err != nil || held {
			return err
		}
	}
	if len(state(b).runs.list) == 0 {
		max := holdLimit(req)
		rows, err := s.pool.Query(ctx, pgRunsSQL, s.handler, b.Partition, max+1)
		if err != nil {
			return err
		}
		var runs []pgRun
		var xid string
		var r pgRun
		if _, err := pgx.ForEachRow(rows, []any{&xid, &r.from, &r.to, &r.n}, func() error {
			x, err := strconv.ParseUint(xid, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: xid %q", outboxfeed.ErrCorruptRecord, xid)
			}
			r.xid = x
			runs = append(runs, r)
			return nil
		}); err != nil {
			return err
		}
		state(b).runs.more = len(runs) > max
		if state(b).runs.more {
			runs = runs[:max]
		}
		state(b).runs.list = runs
	}
	state(b).runs.pending = false
	// The runs of the next Limit records.
	var xids []string
	var from, to []int64
	n := 0
	for _, r := range state(b).runs.list {
		if n >= req.Limit {
			break
		}
		xids, from, to = append(xids, strconv.FormatUint(r.xid, 10)), append(from, r.from), append(to, r.to)
		n += r.n
	}
	rows, err := s.pool.Query(ctx, pgReadRunsSQL, b.Partition, xids, from, to, req.Limit)
	if err != nil {
		return err
	}
	got := make([]outboxfeed.Record, 0, min(n, req.Limit))
	err = scanRecords(rows, func(r outboxfeed.Record) bool {
		got = append(got, r)
		return true
	})
	rows.Close()
	if err != nil {
		return err
	}
	state(b).runs.consume(got)
	hand(b, [][]outboxfeed.Record{got}, req.Limit)
	return nil
}

// readRange reads the range of b's partition past its position
// (pgReadRangeSQL), up to holdLimit records and one, and, when it holds
// no more than that, hands its first batch to b (after b's queued
// records) and keeps the rest, as a claim that read it would have. It
// reports false, having handed out nothing, for a range larger than that
// (read in runs). A lease lost since the claim reads nothing: b then has
// no range records, and its completion is refused (fenced), so nothing
// is skipped.
func (s *Store) readRange(ctx context.Context, b *outboxfeed.Batch, req *outboxfeed.ClaimRequest) (bool, error) {
	limit := holdLimit(req)
	var pb pgx.Batch
	pb.Queue(pgReadSettings)
	pb.Queue(pgReadRangeSQL, s.handler, b.Partition, b.Owner, b.Fence, limit+1)
	res := s.pool.SendBatch(ctx, &pb)
	g := gather{limit: max(req.Limit, 1)}
	fits := true
	rows, err := queryLast(res, pb.Len())
	if err == nil {
		err = scanRecords(rows, func(r outboxfeed.Record) bool {
			if fits = g.n < limit; fits {
				g.add(r)
			}
			return fits
		})
		rows.Close()
	}
	if cerr := res.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil || !fits {
		return false, err // too large to hold: read in runs
	}
	state(b).runs.pending = false
	hand(b, g.inSeqOrder(), req.Limit)
	return true, nil
}

// consume drops from the runs the records read (a prefix of them, in
// order).
func (r *pgRuns) consume(got []outboxfeed.Record) {
	i := 0
	for _, rec := range got {
		for i < len(r.list) && (r.list[i].xid != rec.TxID || rec.Seq > r.list[i].to) {
			i++
		}
		if i == len(r.list) {
			break
		}
		r.list[i].from = rec.Seq + 1
		r.list[i].n--
		if r.list[i].n == 0 || r.list[i].from > r.list[i].to {
			i++
		}
	}
	r.list = r.list[i:]
}

// pgCompleteSQL calls herald.outbox_complete.
const pgCompleteSQL = `SELECT herald.outbox_complete($1, $2, $3, $4, $5, $6, $7, $8,
	$9, $10::text[]::xid8[], $11, $12, $13, $14, $15, $16, $17, $18, $19)`

// completeArgs are herald.outbox_complete's arguments for b and out.
func completeArgs(handler string, b *outboxfeed.Batch, out []outboxfeed.Outcome) []any {
	var lastSeq *int64
	var seqs, qseqs, delays, qdelays []int64
	var states, errs, qstates, qerrs, xids []string
	var attempts, qattempts []int32
	for i := range out {
		r, o := &b.Records[i], out[i]
		if r.Queued == 0 {
			lastSeq = &b.Records[i].Seq
		}
		state, attempt := "", int32(r.Attempt)
		switch o.Kind {
		case outboxfeed.OutcomeDone:
			if r.Queued == 0 {
				continue
			}
			state = outboxfeed.StateDispatched
		case outboxfeed.OutcomeRetryLater:
			state, attempt = outboxfeed.StatePending, attempt+1
		case outboxfeed.OutcomeDeadLettered:
			state, attempt = outboxfeed.StateDeadLetter, attempt+1
		case outboxfeed.OutcomeHold:
			if r.Queued != 0 {
				continue // it keeps its row as it is
			}
			state = outboxfeed.StatePending
		}
		if r.Queued != 0 {
			qseqs, qstates, qattempts = append(qseqs, r.Queued), append(qstates, state), append(qattempts, attempt)
			qdelays, qerrs = append(qdelays, o.Delay.Microseconds()), append(qerrs, storekit.TruncateError(o.Err))
			continue
		}
		seqs, states, attempts = append(seqs, r.Seq), append(states, state), append(attempts, attempt)
		xids = append(xids, strconv.FormatUint(r.TxID, 10))
		delays, errs = append(delays, o.Delay.Microseconds()), append(errs, storekit.TruncateError(o.Err))
	}
	rangeDone := len(out) == len(b.Records) && !b.More
	return []any{handler, b.Partition, b.Owner, b.Fence, rangeDone, b.Takeover, lastSeq, len(out),
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

// keeps reports whether completing b with next goes on with the rest of
// b's range under a renewed lease (instead of claiming anew).
func keeps(b *outboxfeed.Batch, out []outboxfeed.Outcome, next *outboxfeed.ClaimRequest) bool {
	if next == nil || next.Partition != b.Partition || next.Owner != b.Owner {
		return false
	}
	if len(state(b).rest) > 0 || state(b).runs.left() {
		return true
	}
	for i := len(out); i < len(b.Records); i++ {
		if b.Records[i].Queued == 0 {
			return true // range records past a shortened batch
		}
	}
	return false
}

// Complete writes b's outcomes and, with next, claims again, in one round
// trip and one transaction. When next goes on in b's partition with the
// rest of a range the claim read, the lease is renewed and nothing is read
// again.
func (s *Store) Complete(ctx context.Context, b *outboxfeed.Batch, out []outboxfeed.Outcome, next *outboxfeed.ClaimRequest) (bool, *outboxfeed.Batch, error) {
	if len(out) > len(b.Records) {
		return false, nil, fmt.Errorf("%w: %d outcomes for %d records", outboxfeed.ErrInvalidConfig, len(out), len(b.Records))
	}
	if advances(b, out, next) {
		lease, nb, err := s.advance(ctx, b, next)
		if err != nil {
			return false, nil, fmt.Errorf("outboxfeed: complete: %w", err)
		}
		if lease != 'g' {
			return lease == 'l', nb, nil
		}
		// Held, but the partition needs the general path; nothing changed.
	}
	keep := keeps(b, out, next)
	var pb pgx.Batch
	pb.Queue(pgCycleSettings, commitMode(state(b).durable))
	pb.Queue(pgCompleteSQL, completeArgs(s.handler, b, out)...)
	switch {
	case keep:
		pb.Queue(pgKeepSQL, s.handler, b.Partition, b.Owner, next.Lease, b.Fence)
	case next != nil:
		queueClaim(&pb, s.handler, next)
	}
	res := s.pool.SendBatch(ctx, &pb)
	held, nb, err := func() (bool, *outboxfeed.Batch, error) {
		if _, err := res.Exec(); err != nil {
			return false, nil, err
		}
		var held bool
		if err := res.QueryRow().Scan(&held); err != nil {
			return false, nil, err
		}
		switch {
		case keep:
			nb, err := readKeep(res, b, out, next)
			return held, nb, err
		case next != nil:
			nb, err := readClaim(res, 1+wakeups(next), next, nil)
			return held, nb, err
		}
		return held, nil, nil
	}()
	if cerr := res.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil && nb != nil && state(nb).runs.pending {
		err = s.readRuns(ctx, nb, next)
	}
	if err != nil {
		return false, nil, fmt.Errorf("outboxfeed: complete: %w", err)
	}
	return held, nb, nil
}

// readKeep reads herald.outbox_keep's rows and builds the next batch of
// b's range: the range records b's completion left over, then the rest.
func readKeep(res pgx.BatchResults, b *outboxfeed.Batch, out []outboxfeed.Outcome, next *outboxfeed.ClaimRequest) (*outboxfeed.Batch, error) {
	rows, err := res.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var nb *outboxfeed.Batch
	var fence int64
	var tk bool
	var tenant, channel pgtype.Text
	for rows.Next() {
		if err := rows.Scan(&fence, &tk, &tenant, &channel); err != nil {
			return nil, err
		}
		if nb == nil {
			nb = &outboxfeed.Batch{Partition: b.Partition, Owner: b.Owner, Fence: fence, Takeover: tk,
				Driver: &pgBatch{durable: state(b).durable, runs: state(b).runs}}
		}
		if tenant.Valid {
			block(nb, fanout.Key{Tenant: tenant.String, Channel: channel.String})
		}
	}
	if err := rows.Err(); err != nil || nb == nil {
		return nil, err // nil: another outboxfeed.Worker took the partition over
	}
	// The rest, without copying it: only range records a shortened batch
	// left over (rare) go in front of it.
	ranged := state(b).rest
	var left []outboxfeed.Record
	for i := len(out); i < len(b.Records); i++ {
		if b.Records[i].Queued == 0 {
			left = append(left, b.Records[i])
		}
	}
	if len(left) > 0 {
		ranged = append([][]outboxfeed.Record{left}, state(b).rest...)
	}
	if len(ranged) == 0 && !state(nb).runs.left() {
		// Nothing left to hand out (the range's last runs were read).
		nb.More = false
		return nb, nil
	}
	if len(ranged) == 0 {
		state(nb).runs.pending = true
		nb.More = true
		return nb, nil
	}
	hand(nb, ranged, next.Limit)
	return nb, nil
}

// commitMode is synchronous_commit for a cycle's transaction.
func commitMode(durable bool) string {
	if durable {
		return "on"
	}
	return "off"
}

// wakeups is how many statements queueWakeup adds for req.
func wakeups(req *outboxfeed.ClaimRequest) int {
	if req.Disarm || req.Arm > 0 {
		return 1
	}
	return 0
}

// pgAdvanceSQL completes a batch that finished its partition's range with
// every record done and, in the same statement, keeps the lease (a new
// fence, the expiry renewed) and reads the partition's next range: the
// records committed since the range's end (hi) as this statement sees
// them, its snapshot the new hi. When there are none it gives the lease
// back instead, its position at that snapshot. It costs one statement
// where the completion and a claim of the partition take two plpgsql
// functions of several statements each. Its result is a lease row (kind
// 'l'; none when the lease was lost, and then nothing changed) and the
// range's records, in the columns of herald.outbox_claim.
//
// A partition with records in its retry queue, one that is not active
// (retiring after a change of the partition count) or a handler that is
// not active takes the general path (herald.outbox_complete, then
// herald.outbox_claim): the statement changes nothing and returns one row
// of kind 'g'.
//
// The statement's own snapshot bounds the range; the lease checked in the
// update (owner and fence) means nobody else moved the position since the
// holder's previous transaction, which that snapshot therefore covers. The
// update finds the row cur read by its tuple id: while a transaction
// holds the xmin horizon back, the lease row's versions pile up, and each
// lookup through the index walks them all.
//
// It takes several partitions of one completion step at once, each as it
// would take it alone, its rows carrying its partition: one statement
// costs PostgreSQL about half of what three do (most of a statement's cost
// is starting its plan, docs/performance.md), and as much as the
// statement for one partition alone did. k is materialized: inlined, each
// use of k.go became a subplan of its own, run for every partition.
//
// With $9 (ClaimRequest.Hold) a partition whose range came back empty
// while another of the statement's found records keeps its lease too,
// with an empty range (lo its old hi, hi the snapshot; its lease row of
// kind 'e': a batch of no records), so the step after reads it again in
// this statement instead of claiming it through pgClaimManySQL. A step
// whose partitions all came back empty gives them all back, so the lease
// of a partition outlives its records by one step at most. One kept that
// way a second time in a row is left as it is (k.as_is: its open range is
// the empty one of the step before, and the next read starts from its end
// all the same), unless half its lease has run: no write. With $9, a row
// of kind 'n' says that the step kept every partition it was given and
// found no other partition of the handler free to claim (none without a
// holder or with an expired lease, no change of the partition count under
// way): CompleteMany then leaves pgClaimManySQL out of the next step.
//
// $1 handler, $2 partitions, $3 their owners, $4 fences, $5 lease, $6 the
// batches' last seqs (NULL: none), $7 their records, $8 the range limit,
// $9 hold; the arrays are parallel.
const pgAdvanceSQL = `WITH a AS MATERIALIZED (
	SELECT * FROM unnest($2::int[], $3::text[], $4::bigint[], $6::bigint[], $7::int[]) AS a(part, owner, fence, last_seq, n)),
cur AS MATERIALIZED (
	SELECT p.ctid, p.part, a.owner, a.fence AS old_fence, a.last_seq, a.n, p.lo, p.hi, p.pos_seq, pg_current_snapshot() AS snap,
		ARRAY(SELECT pg_snapshot_xip(p.hi)) AS xip, p.expires_at < clock_timestamp() + $5::interval / 2 AS renew,
		p.state = 'active' AND p.hi IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM herald.outbox_retry r WHERE r.handler = $1 AND r.part = p.part AND r.state = 'pending')
		AND EXISTS (SELECT 1 FROM herald.outbox_handler h WHERE h.name = $1 AND h.state = 'active') AS fast
	FROM a JOIN herald.outbox_partition p ON p.handler = $1 AND p.part = a.part AND p.owner = a.owner AND p.fence = a.fence AND p.open),
recs AS MATERIALIZED (
	SELECT c.part AS cpart, o.* FROM cur c CROSS JOIN LATERAL (
		(SELECT o.* FROM unnest(c.xip) AS x(xid)
			CROSS JOIN LATERAL (SELECT * FROM herald.outbox o WHERE o.part = c.part AND o.xid = x.xid OFFSET 0) o)
		UNION ALL
		(SELECT o.* FROM herald.outbox o WHERE o.part = c.part AND o.xid >= pg_snapshot_xmax(c.hi)
			ORDER BY o.xid, o.seq LIMIT $8 + 1)
		LIMIT $8 + 1) o
	WHERE c.fast),
k AS MATERIALIZED (SELECT c.part, g.go, g.stay, c.fast AND g.stay AND NOT g.go AND c.n = 0 AND NOT c.renew AS as_is
	FROM cur c CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM recs o WHERE o.cpart = c.part) AS go) g0
	CROSS JOIN LATERAL (SELECT g0.go, g0.go OR ($9 AND EXISTS (SELECT 1 FROM recs)) AS stay) g),
upd AS (
	UPDATE herald.outbox_partition p SET
		lo = CASE WHEN k.stay THEN c.hi ELSE c.snap END,
		hi = CASE WHEN k.stay THEN c.snap END,
		owner = CASE WHEN k.stay THEN p.owner END,
		expires_at = CASE WHEN k.stay THEN clock_timestamp() + $5 END,
		fence = p.fence + k.stay::int, open = k.stay,
		claimed_at = CASE WHEN k.go THEN clock_timestamp() ELSE p.claimed_at END,
		pos_xid = '0', pos_seq = 0, takeovers = 0, tk_range = false, claim_qto = 0,
		done_at = now(), batches = p.batches + 1
	FROM cur c JOIN k ON k.part = c.part
	WHERE p.ctid = c.ctid AND p.handler = $1 AND p.part = c.part AND p.owner = c.owner AND p.fence = c.old_fence AND p.open
		AND p.state = 'active' AND c.fast AND NOT k.as_is
	RETURNING p.part, p.fence, p.open, k.go, c.lo, c.hi, c.pos_seq, c.old_fence, c.last_seq, c.n),
log AS (
	INSERT INTO herald.outbox_batch (handler, part, fence, lo, hi, from_xid, from_seq, to_xid, to_seq, records, by_seq)
	SELECT $1, u.part, u.old_fence, u.lo, u.hi, '0', u.pos_seq, '0', coalesce(u.last_seq, u.pos_seq), u.n, true FROM upd u WHERE u.n > 0)
SELECT CASE WHEN u.open AND NOT u.go THEN 'e' ELSE 'l' END::"char", u.part, u.fence, 0, NULL::bigint, 0, true, NULL::text, NULL::bigint, NULL::text,
	NULL::text, NULL::text, NULL::text, NULL::int, NULL::jsonb, NULL::jsonb, NULL::timestamptz, NULL::text, false, 0::bigint FROM upd u
UNION ALL
SELECT 'e'::"char", k.part, c.old_fence, 0, NULL::bigint, 0, true, NULL::text, NULL::bigint, NULL::text,
	NULL::text, NULL::text, NULL::text, NULL::int, NULL::jsonb, NULL::jsonb, NULL::timestamptz, NULL::text, false, 0::bigint
FROM k JOIN cur c ON c.part = k.part WHERE k.as_is
UNION ALL
SELECT 'g'::"char", c.part, c.old_fence, 0, NULL::bigint, 0, true, NULL::text, NULL::bigint, NULL::text,
	NULL::text, NULL::text, NULL::text, NULL::int, NULL::jsonb, NULL::jsonb, NULL::timestamptz, NULL::text, false, 0::bigint
FROM cur c WHERE NOT c.fast
UNION ALL
SELECT 'r'::"char", u.part, u.fence, 0, NULL::bigint, 0, true, o.id::text, o.seq, o.xid::text,
	o.tenant_id, o.channel, o.type, o.schema_version, o.payload, o.freshness, o.occurred_at, o.kind, false, 0::bigint
FROM upd u JOIN recs o ON o.cpart = u.part WHERE u.open
UNION ALL
SELECT 'n'::"char", -1, 0::bigint, 0, NULL::bigint, 0, true, NULL::text, NULL::bigint, NULL::text,
	NULL::text, NULL::text, NULL::text, NULL::int, NULL::jsonb, NULL::jsonb, NULL::timestamptz, NULL::text, false, 0::bigint
WHERE $9 AND (SELECT count(*) FROM k WHERE k.stay) = cardinality($2)
	AND NOT EXISTS (SELECT 1 FROM cur c WHERE NOT c.fast)
	AND NOT EXISTS (SELECT 1 FROM herald.outbox_partition x WHERE x.handler = $1 AND x.part <> ALL ($2)
		AND (x.state IN ('waiting', 'retiring') OR (x.state = 'active' AND (x.owner IS NULL OR x.expires_at < clock_timestamp()))))`

// advances reports whether completing b with next goes on in b's
// partition with its next range (pgAdvanceSQL): next names b's partition,
// the batch ended the range it read, and every record of it, none from the
// retry queue, was done.
func advances(b *outboxfeed.Batch, out []outboxfeed.Outcome, next *outboxfeed.ClaimRequest) bool {
	if next == nil || next.Partition != b.Partition || next.Owner != b.Owner || b.More ||
		len(out) != len(b.Records) || len(b.Blocked) > 0 || len(state(b).rest) > 0 || state(b).runs.left() {
		return false
	}
	for i := range out {
		if out[i].Kind != outboxfeed.OutcomeDone || b.Records[i].Queued != 0 {
			return false
		}
	}
	return true
}

// advance completes b (advances) and reads its partition's next range
// under the same lease, in one statement. It returns the kind of the
// statement's lease row: 'l' held, 'g' held but nothing done (the general
// path is needed), 0 lost.
func (s *Store) advance(ctx context.Context, b *outboxfeed.Batch, next *outboxfeed.ClaimRequest) (byte, *outboxfeed.Batch, error) {
	var pb pgx.Batch
	pb.Queue(pgCycleSettings, commitMode(state(b).durable))
	queueWakeup(&pb, next)
	pb.Queue(pgAdvanceSQL, s.handler, []int32{int32(b.Partition)}, []string{b.Owner}, []int64{b.Fence}, next.Lease,
		[]*int64{lastSeqOf(b)}, []int32{int32(len(b.Records))}, claimRangeRecords(next), false)
	res := s.pool.SendBatch(ctx, &pb)
	var lease byte
	nb, err := readClaim(res, pb.Len(), next, &lease)
	if cerr := res.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil && nb != nil && state(nb).runs.pending {
		err = s.readRuns(ctx, nb, next)
	}
	if err != nil {
		return 0, nil, err
	}
	return lease, nb, nil
}
