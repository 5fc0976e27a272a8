// Package backoff is the outbox's bounded exponential backoff, with jitter.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Exp is base·2^(n-1), capped at max (n ≥ 1).
func Exp(n int, base, max time.Duration) time.Duration {
	if n < 1 {
		n = 1
	}
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// Retry is bounded exponential backoff with full jitter: uniform in
// [0, min(max, base·2^(attempt-1))].
func Retry(attempt int, base, max time.Duration) time.Duration {
	d := Exp(attempt, base, max)
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

// Outage backs off a dependency outage: bounded exponential with
// "equal" jitter (half fixed, half random), so it never collapses to a
// tight loop.
func Outage(failures int, base, max time.Duration) time.Duration {
	d := Exp(failures, base, max)
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(half+1)
}
