package fanout

import (
	"log/slog"
	"sync"
	"time"
)

// rateLimitedLog logs at most one line per kind per interval, adding how
// many were suppressed since the last one, so a flood of bad messages or a
// flapping connection cannot flood the log.
type rateLimitedLog struct {
	log      *slog.Logger
	interval time.Duration

	mu   sync.Mutex
	last map[string]time.Time
	skip map[string]int
}

func newRateLimitedLog(log *slog.Logger, interval time.Duration) *rateLimitedLog {
	return &rateLimitedLog{log: log, interval: interval, last: make(map[string]time.Time), skip: make(map[string]int)}
}

// warn logs msg (the kind) with args unless one was logged within interval.
func (r *rateLimitedLog) warn(msg string, args ...any) {
	now := time.Now()
	r.mu.Lock()
	if last, ok := r.last[msg]; ok && now.Sub(last) < r.interval {
		r.skip[msg]++
		r.mu.Unlock()
		return
	}
	skipped := r.skip[msg]
	r.last[msg] = now
	r.skip[msg] = 0
	r.mu.Unlock()
	if skipped > 0 {
		args = append(args, "suppressed", skipped)
	}
	r.log.Warn(msg, args...)
}
