package storekit

import (
	"fmt"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
)

// Renew is what a store's Renew does around update, its one statement
// that extends the lease of b's partition to lease from now, conditional
// on b's owner and fence, and reports the rows it matched: it refuses a
// lease that is not positive before running it, and wraps
// outboxfeed.ErrLeaseLost when no row matched.
func Renew(b *outboxfeed.Batch, lease time.Duration, update func() (matched int64, err error)) error {
	if lease <= 0 {
		return fmt.Errorf("outboxfeed: renew: %w: lease %v: must be positive", outboxfeed.ErrInvalidConfig, lease)
	}
	n, err := update()
	if err != nil {
		return fmt.Errorf("outboxfeed: renew: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("outboxfeed: renew partition %d at fence %d for %s: %w", b.Partition, b.Fence, b.Owner, outboxfeed.ErrLeaseLost)
	}
	return nil
}
