package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"
)

// sqliteRenew extends handler ?4's lease to ?1 (never shortening it) under
// owner ?2 and fence ?3.
const sqliteRenew = `UPDATE outbox_partition SET expires_at = max(expires_at, ?1)
WHERE handler = ?4 AND part = 0 AND owner = ?2 AND fence = ?3`

// Renew extends the lease of b's partition to lease from now, in one
// statement conditional on b's owner and fence (as Complete is); it
// returns an error wrapping outboxfeed.ErrLeaseLost when the lease is
// another owner's, or nobody's.
func (s *Store) Renew(ctx context.Context, b *outboxfeed.Batch, lease time.Duration) error {
	if b == nil || b.Partition != sqlitePart {
		return fmt.Errorf("outboxfeed: renew: %w: SQLite has one partition, 0", outboxfeed.ErrInvalidConfig)
	}
	return storekit.Renew(b, lease, func() (int64, error) {
		res, err := s.db.ExecContext(ctx, sqliteRenew, time.Now().Add(lease).UnixMicro(), b.Owner, b.Fence, s.handler)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}
