// Package wait holds the one way Herald sleeps inside work that a context
// can cancel.
package wait

import (
	"context"
	"time"
)

// Sleep waits d or until ctx ends, and reports whether d elapsed (for d ≤ 0:
// whether ctx is still live).
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
