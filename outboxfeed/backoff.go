package outboxfeed

import (
	"context"
	"math/rand/v2"
	"sync"
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

// sleepCtx waits d or until ctx ends; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
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

// logLimiter lets one log line per key through per interval and counts the
// ones it held back.
type logLimiter struct {
	every      time.Duration
	mu         sync.Mutex
	last       map[string]time.Time
	suppressed map[string]int
}

func newLogLimiter(every time.Duration) *logLimiter {
	return &logLimiter{every: every, last: map[string]time.Time{}, suppressed: map[string]int{}}
}

// allow reports whether to log now, and how many lines were suppressed
// since the last one logged.
func (l *logLimiter) allow(key string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if last, ok := l.last[key]; ok && now.Sub(last) < l.every {
		l.suppressed[key]++
		return false, 0
	}
	n := l.suppressed[key]
	l.last[key] = now
	l.suppressed[key] = 0
	return true, n
}
