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
