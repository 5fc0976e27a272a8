// Package ratelog keeps repeated log lines from flooding a log: a Limiter
// lets a key through at most Burst times per Window and counts what it
// held back, and a Logger logs through one, adding how many lines of the
// same message were suppressed since the last one it let through. Every
// package of Herald that logs per event (a connection, a record, a
// reconnect) uses it, so thousands of failures at once cost a few lines.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Limiter decides, per key, whether a line may be logged now.
type Limiter struct {
	window time.Duration
	burst  int

	// Now is the clock; time.Now by default. Tests replace it before use.
	Now func() time.Time

	mu    sync.Mutex
	slots map[string]*slot
}

type slot struct {
	start      time.Time
	n          int
	suppressed int
}

// NewLimiter lets each key through burst times per window (burst < 1
// counts as 1).
func NewLimiter(window time.Duration, burst int) *Limiter {
	return &Limiter{window: window, burst: max(burst, 1), Now: time.Now, slots: map[string]*slot{}}
}

// Allow reports whether a line for key may be logged now and, when it
// may, how many were held back since the last one let through.
func (l *Limiter) Allow(key string) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.Now()
	s := l.slots[key]
	if s == nil {
		s = &slot{start: now}
		l.slots[key] = s
	}
	if now.Sub(s.start) >= l.window {
		s.start, s.n = now, 0
	}
	if s.n >= l.burst {
		s.suppressed++
		return false, 0
	}
	s.n++
	suppressed, s.suppressed = s.suppressed, 0
	return true, suppressed
}

// Logger is a slog.Logger behind a Limiter keyed by message.
type Logger struct {
	*Limiter
	log *slog.Logger
}

// New returns a Logger writing to log, each message at most burst times
// per window.
func New(log *slog.Logger, window time.Duration, burst int) *Logger {
	return &Logger{Limiter: NewLimiter(window, burst), log: log}
}

// Log writes msg at level with attrs unless msg was let through burst
// times in the current window; a line let through after suppressed ones
// carries suppressed=N.
func (l *Logger) Log(level slog.Level, msg string, attrs ...slog.Attr) {
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	ok, n := l.Allow(msg)
	if !ok {
		return
	}
	if n > 0 {
		attrs = append(attrs, slog.Int("suppressed", n))
	}
	l.log.LogAttrs(context.Background(), level, msg, attrs...)
}

// Warn is Log at slog.LevelWarn with slog's loosely typed arguments.
func (l *Logger) Warn(msg string, args ...any) {
	if !l.log.Enabled(context.Background(), slog.LevelWarn) {
		return
	}
	ok, n := l.Allow(msg)
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	l.log.Warn(msg, args...)
}
