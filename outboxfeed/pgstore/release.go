package pgstore

import (
	"context"
	"fmt"

	"github.com/heraldgw/herald/outboxfeed"
)

var _ outboxfeed.LeaseReleaser = (*Store)(nil)

// ReleaseLeases ends the leases of the handler's partitions that one of
// owners holds: a lease without an open batch goes back (owner cleared,
// as a completion gives it back); one over a batch claimed and not
// completed (open) expires now, so the next claim takes the batch over
// as after an expiry. Fences stay.
func (s *Store) ReleaseLeases(ctx context.Context, owners []string) (int, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE herald.outbox_partition p
SET owner = CASE WHEN p.open THEN p.owner END,
	expires_at = CASE WHEN p.open THEN clock_timestamp() END
WHERE p.handler = $1 AND p.owner = ANY($2) AND p.expires_at > clock_timestamp()`, s.handler, owners)
	if err != nil {
		return 0, fmt.Errorf("outboxfeed: release leases: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

var _ outboxfeed.BatchReturner = (*Store)(nil)

// pgReturnSQL gives back the open claims of the batches listed ($2: part,
// $3: owner, $4: fence) that their owner still holds under their fence.
// A claim that was no takeover is closed, as a completion of none of its
// records would leave it (lo, hi and the position stay, claim_qto goes);
// one that was a takeover keeps its claim open, expires now and counts
// one takeover less, so that the next claim, which adds one, takes it
// over with the count it had. Every right-hand side reads the row as it
// was.
const pgReturnSQL = `UPDATE herald.outbox_partition p
SET open = p.takeovers > 0,
	takeovers = greatest(p.takeovers - 1, 0),
	owner = CASE WHEN p.takeovers > 0 THEN p.owner END,
	expires_at = CASE WHEN p.takeovers > 0 THEN clock_timestamp() END,
	claim_qto = CASE WHEN p.takeovers > 0 THEN p.claim_qto ELSE 0 END
FROM unnest($2::int[], $3::text[], $4::bigint[]) AS b(part, owner, fence)
WHERE p.handler = $1 AND p.part = b.part AND p.owner = b.owner AND p.fence = b.fence AND p.open`

// ReturnBatches gives back the batches of bs whose claim is still open
// under their owner and fence (outboxfeed.BatchReturner), in one
// statement.
func (s *Store) ReturnBatches(ctx context.Context, bs []*outboxfeed.Batch) (int, error) {
	if len(bs) == 0 {
		return 0, nil
	}
	parts := make([]int32, len(bs))
	owners := make([]string, len(bs))
	fences := make([]int64, len(bs))
	for i, b := range bs {
		parts[i], owners[i], fences[i] = int32(b.Partition), b.Owner, b.Fence
	}
	tag, err := s.pool.Exec(ctx, pgReturnSQL, s.handler, parts, owners, fences)
	if err != nil {
		return 0, fmt.Errorf("outboxfeed: return batches: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
