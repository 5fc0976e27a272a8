package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
)

var _ outboxfeed.LeaseReleaser = (*Store)(nil)

// ReleaseLeases ends the lease of the handler's partition when one of
// owners holds it: a lease without an open claim goes back (owner
// cleared, as a completion gives it back); one over a claimed batch that
// was not completed expires now, so the next claim takes the batch over
// as after an expiry. The fence stays either way.
func (s *Store) ReleaseLeases(ctx context.Context, owners []string) (int, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := time.Now().UnixMicro()
		for _, owner := range owners {
			res, err := tx.ExecContext(ctx, `UPDATE outbox_partition
SET owner = CASE WHEN claim_to IS NULL THEN NULL ELSE owner END,
	expires_at = CASE WHEN claim_to IS NULL THEN NULL ELSE ?1 END
WHERE handler = ?2 AND part = 0 AND owner = ?3 AND expires_at > ?1`, now, s.handler, owner)
			if err != nil {
				return err
			}
			k, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += k
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("outboxfeed: release leases: %w", err)
	}
	return int(n), nil
}
