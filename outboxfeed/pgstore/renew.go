package pgstore

import (
	"context"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"
)

// pgRenewSQL extends the lease of an open claim under its owner and fence;
// the fence stays, so the publications of the batch stay valid.
const pgRenewSQL = `UPDATE herald.outbox_partition p SET expires_at = greatest(p.expires_at, clock_timestamp() + $5::interval)
WHERE p.handler = $1 AND p.part = $2 AND p.owner = $3 AND p.fence = $4 AND p.open`

// Renew extends the lease of b's partition to lease from now, in one
// statement conditional on b's owner and fence and on the claim being
// open (as herald.outbox_complete is); it returns an error wrapping
// outboxfeed.ErrLeaseLost when no row matched.
func (s *Store) Renew(ctx context.Context, b *outboxfeed.Batch, lease time.Duration) error {
	return storekit.Renew(b, lease, func() (int64, error) {
		tag, err := s.pool.Exec(ctx, pgRenewSQL, s.handler, b.Partition, b.Owner, b.Fence, lease)
		return tag.RowsAffected(), err
	})
}
