package outboxfeed

import (
	"math/rand/v2"
	"time"
)

// expDelay is base·2^(n-1), capped at max (n ≥ 1).
func expDelay(n int, base, max time.Duration) time.Duration {
	if n < 1 {
		n = 1
	}
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// retryDelay is bounded exponential backoff with full jitter: uniform in
// [0, min(max, base·2^(attempt-1))].
func retryDelay(attempt int, base, max time.Duration) time.Duration {
	d := expDelay(attempt, base, max)
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

// outageDelay backs off a dependency outage: bounded exponential with
// "equal" jitter (half fixed, half random), so it never collapses to a
// tight loop.
func outageDelay(failures int, base, max time.Duration) time.Duration {
	d := expDelay(failures, base, max)
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(half+1)
}
