package outboxfeed

import (
	"context"
	"database/sql"

	"github.com/heraldgw/herald/fanout"
)

// The SQLite claim runs inside the cycle's BEGIN IMMEDIATE transaction, so
// nothing changes under it; it picks in Go with a few indexed statements
// (in-process, they cost no round trip) and then claims by seq. The rules
// are the PostgreSQL claim's (see pgClaim): a window of the first
// claimable records in seq order, and, when that window is full, a quarter
// of the batch kept for a walk over channels whose pending records all lie
// beyond it.

// sqliteNear walks pending records in seq order and keeps those whose
// channel has none in processing and no earlier record waiting for a
// retry. It names its index: left alone, the planner walks the whole table
// in rowid order, dispatched records included.
const sqliteNear = `
SELECT o.seq, o.tenant_id, o.channel FROM outbox o INDEXED BY outbox_claim_idx
WHERE o.state = 'pending' AND o.next_attempt_at <= ?1
  AND NOT EXISTS (SELECT 1 FROM outbox b
	WHERE b.tenant_id = o.tenant_id AND b.channel = o.channel AND b.state = 'processing')
  AND NOT EXISTS (SELECT 1 FROM outbox b
	WHERE b.tenant_id = o.tenant_id AND b.channel = o.channel AND b.state = 'pending'
	  AND b.attempt > 0 AND b.next_attempt_at > ?1 AND b.seq < o.seq)
ORDER BY o.seq
LIMIT ?2`

// sqliteNextChannel is the next channel after (?1, ?2) with pending
// records, and its first one.
const sqliteNextChannel = `
SELECT tenant_id, channel, seq FROM outbox INDEXED BY outbox_pending_channel_idx
WHERE state = 'pending' AND (tenant_id, channel) > (?1, ?2)
ORDER BY tenant_id, channel, seq LIMIT 1`

const sqliteChannelBusy = `
SELECT EXISTS (SELECT 1 FROM outbox INDEXED BY outbox_processing_channel_idx
	WHERE state = 'processing' AND tenant_id = ?1 AND channel = ?2)`

// sqliteChannelPrefix is a channel's first ?3 pending records.
const sqliteChannelPrefix = `
SELECT seq, next_attempt_at FROM outbox INDEXED BY outbox_pending_channel_idx
WHERE state = 'pending' AND tenant_id = ?1 AND channel = ?2
ORDER BY seq LIMIT ?3`

// sqliteClaimSeqs claims the picked records (?2, a JSON array of seqs).
const sqliteClaimSeqs = `
UPDATE outbox
SET state = 'processing', lease_owner = ?1, lease_expires_at = ?3, fence = fence + 1
WHERE seq IN (SELECT value FROM json_each(?2)) AND state = 'pending'
RETURNING ` + sqliteRecordColumns

type sqliteCandidate struct {
	seq int64
	key fanout.Key
}

// pick chooses the seqs to claim for req, in seq order per channel, and
// fills res's cursor (next) and spare.
func (s *SQLiteStore) pick(ctx context.Context, tx *sql.Tx, req claimRequest, now int64, res *claimResult) ([]int64, error) {
	window := req.windowOrDefault()
	far := farPlan(req.limit)
	near, err := sqliteWindow(ctx, tx, now, window)
	if err != nil {
		return nil, err
	}
	full := far.reserve > 0 && len(near) >= window && fewChannels(near, far.spread)
	quota := req.limit
	if full {
		quota -= far.reserve
	}
	taken := make(map[fanout.Key]bool)
	var seqs []int64
	for _, c := range near {
		if len(seqs) == quota {
			if !taken[c.key] {
				res.spare++ // claimable by another lane
			}
			continue
		}
		taken[c.key] = true
		seqs = append(seqs, c.seq)
	}
	res.scanned = len(near)
	if !full {
		return seqs, nil
	}
	farSeqs, next, more, err := sqliteFar(ctx, tx, req.cursor, near[len(near)-1].seq, now, far, req.limit-len(seqs))
	if err != nil {
		return nil, err
	}
	res.next, res.spare = next, res.spare+more
	return append(seqs, farSeqs...), nil
}

func sqliteWindow(ctx context.Context, tx *sql.Tx, now int64, window int) ([]sqliteCandidate, error) {
	rows, err := tx.QueryContext(ctx, sqliteNear, now, window)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sqliteCandidate
	for rows.Next() {
		var c sqliteCandidate
		if err := rows.Scan(&c.seq, &c.key.Tenant, &c.key.Channel); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// sqliteFar walks channels after cursor, takes those whose first pending
// record comes after last (beyond the window), and picks of each the due
// prefix of its first far.prefix records, want in all. It returns the
// cursor for the next claim (zero when the walk reached the last channel)
// and how many more it could have taken.
func sqliteFar(ctx context.Context, tx *sql.Tx, cursor fanout.Key, last, now int64, far farClaim, want int) ([]int64, fanout.Key, int, error) {
	var seqs []int64
	more := 0
	for visited := 0; visited < far.channels && len(seqs) < want; visited++ {
		var k fanout.Key
		var first int64
		err := tx.QueryRowContext(ctx, sqliteNextChannel, cursor.Tenant, cursor.Channel).Scan(&k.Tenant, &k.Channel, &first)
		if err == sql.ErrNoRows {
			return seqs, fanout.Key{}, more, nil
		}
		if err != nil {
			return nil, cursor, 0, err
		}
		cursor = k
		if first <= last {
			continue // in the window: the first stage's
		}
		var busy bool
		if err := tx.QueryRowContext(ctx, sqliteChannelBusy, k.Tenant, k.Channel).Scan(&busy); err != nil {
			return nil, cursor, 0, err
		}
		if busy {
			continue
		}
		due, err := sqliteDuePrefix(ctx, tx, k, now, far.prefix)
		if err != nil {
			return nil, cursor, 0, err
		}
		n := min(len(due), want-len(seqs))
		seqs = append(seqs, due[:n]...)
		more += len(due) - n
	}
	return seqs, cursor, more, nil
}

// sqliteDuePrefix is a channel's first pending records up to its first one
// not yet due, at most limit.
func sqliteDuePrefix(ctx context.Context, tx *sql.Tx, k fanout.Key, now int64, limit int) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, sqliteChannelPrefix, k.Tenant, k.Channel, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var seq, next int64
		if err := rows.Scan(&seq, &next); err != nil {
			return nil, err
		}
		if next > now {
			break
		}
		out = append(out, seq)
	}
	return out, rows.Err()
}

// fewChannels reports whether cs hold records of fewer than n channels.
func fewChannels(cs []sqliteCandidate, n int) bool {
	seen := make(map[fanout.Key]struct{}, n)
	for _, c := range cs {
		seen[c.key] = struct{}{}
		if len(seen) >= n {
			return false
		}
	}
	return true
}
