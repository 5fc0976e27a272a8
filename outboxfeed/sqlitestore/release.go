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
	n, err := s.updateEach(ctx, `UPDATE outbox_partition
SET owner = CASE WHEN claim_to IS NULL THEN NULL ELSE owner END,
	expires_at = CASE WHEN claim_to IS NULL THEN NULL ELSE ?1 END
WHERE handler = ?2 AND part = 0 AND owner = ?3 AND expires_at > ?1`, len(owners), func(now int64, i int) []any {
		return []any{now, s.handler, owners[i]}
	})
	if err != nil {
		return 0, fmt.Errorf("outboxfeed: release leases: %w", err)
	}
	return n, nil
}

var _ outboxfeed.BatchReturner = (*Store)(nil)

// ReturnBatches gives back the batches of bs whose claim is still open
// under their owner and fence (outboxfeed.BatchReturner). A claim that
// was no takeover is closed, as a completion of none of its records
// would leave it (the position stays, claim_to and claim_qto go); one
// that was a takeover stays open, expires now and counts one takeover
// less, so that the next claim, which adds one, takes it over with the
// count it had. Every right-hand side reads the row as it was.
func (s *Store) ReturnBatches(ctx context.Context, bs []*outboxfeed.Batch) (int, error) {
	n, err := s.updateEach(ctx, `UPDATE outbox_partition
SET claim_to = CASE WHEN takeovers > 0 THEN claim_to END,
	claim_qto = CASE WHEN takeovers > 0 THEN claim_qto ELSE 0 END,
	owner = CASE WHEN takeovers > 0 THEN owner END,
	expires_at = CASE WHEN takeovers > 0 THEN ?1 END,
	takeovers = max(takeovers - 1, 0)
WHERE handler = ?2 AND part = ?3 AND owner = ?4 AND fence = ?5 AND claim_to IS NOT NULL`, len(bs), func(now int64, i int) []any {
		return []any{now, s.handler, bs[i].Partition, bs[i].Owner, bs[i].Fence}
	})
	if err != nil {
		return 0, fmt.Errorf("outboxfeed: return batches: %w", err)
	}
	return n, nil
}

// updateEach runs query n times in one transaction, with the arguments
// args gives for each (now is the transaction's time, in microseconds),
// and reports how many rows they changed in all.
func (s *Store) updateEach(ctx context.Context, query string, n int, args func(now int64, i int) []any) (int, error) {
	var changed int64
	if n == 0 {
		return 0, nil
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := time.Now().UnixMicro()
		for i := range n {
			res, err := tx.ExecContext(ctx, query, args(now, i)...)
			if err != nil {
				return err
			}
			k, err := res.RowsAffected()
			if err != nil {
				return err
			}
			changed += k
		}
		return nil
	})
	return int(changed), err
}
