package outboxfeed

import (
	"context"
	"time"
)

// preciseBelow is the longest wait sleepOrKick times with preciseSleep
// rather than a runtime timer.
const preciseBelow = 4 * time.Millisecond

// sleepOrKick sleeps d, or less when kick is ready or ctx ends; it reports
// a kick. A wait shorter than preciseBelow (the active poll's, between
// records that come a millisecond apart) is timed by preciseSleep: in a
// process with nothing else to do, as herald serve is between two
// records, the runtime's timers wake a sleeping process only on whole
// milliseconds (its poller waits in milliseconds), so a 500µs wait took
// 1.09 ms at the median on the benchmark machine, and every step of the
// active poll's backoff up to a millisecond more.
func sleepOrKick(ctx context.Context, d time.Duration, kick <-chan struct{}) bool {
	if d <= 0 || d >= preciseBelow {
		kicked, _ := sleepOrWake(ctx, d, kick)
		return kicked
	}
	done := make(chan struct{})
	go func() {
		preciseSleep(d)
		close(done)
	}()
	select {
	case <-ctx.Done():
		return false
	case <-done:
		return false
	case <-kick:
		return true
	}
}
