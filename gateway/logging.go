package gateway

import (
	"context"
	"log/slog"
	"net/url"
	"sync"
	"time"
)

// rateLimitedLog lets per-connection events through at most burst times per
// window for each message, and reports how many were suppressed when the
// next window lets one through. Thousands of clients failing at once thus
// cost a few log lines, not thousands.
type rateLimitedLog struct {
	log    *slog.Logger
	window time.Duration
	burst  int
	now    func() time.Time // time.Now; tests replace it

	mu    sync.Mutex
	slots map[string]*logSlot
}

type logSlot struct {
	start      time.Time
	n          int
	suppressed int
}

func newRateLimitedLog(log *slog.Logger, window time.Duration, burst int) *rateLimitedLog {
	return &rateLimitedLog{log: log, window: window, burst: burst, now: time.Now, slots: map[string]*logSlot{}}
}

// Log writes msg at level unless msg was logged burst times in the current
// window.
func (l *rateLimitedLog) Log(level slog.Level, msg string, attrs ...slog.Attr) {
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	l.mu.Lock()
	now := l.now()
	s := l.slots[msg]
	if s == nil {
		s = &logSlot{start: now}
		l.slots[msg] = s
	}
	if now.Sub(s.start) >= l.window {
		s.start, s.n = now, 0
	}
	if s.n >= l.burst {
		s.suppressed++
		l.mu.Unlock()
		return
	}
	s.n++
	suppressed := s.suppressed
	s.suppressed = 0
	l.mu.Unlock()
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed_before", suppressed))
	}
	l.log.LogAttrs(context.Background(), level, msg, attrs...)
}

// secretParams are query parameters whose values never reach a log.
var secretParams = []string{"access_token", "ticket", "token", "sub_token"}

// redactURL returns u as a string with secret query values replaced.
func redactURL(u *url.URL) string {
	if u.RawQuery == "" {
		return u.String()
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		c := *u
		c.RawQuery = "REDACTED-unparseable"
		return c.String()
	}
	changed := false
	for _, p := range secretParams {
		if vs, ok := q[p]; ok {
			for i := range vs {
				vs[i] = "REDACTED"
			}
			changed = true
		}
	}
	if !changed {
		return u.String()
	}
	c := *u
	c.RawQuery = q.Encode()
	return c.String()
}
