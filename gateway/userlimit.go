package gateway

import (
	"sync"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/session"
)

// userLimiter counts the open connections of each user (tenant and
// subject) against Config.MaxConnectionsPerUser. A nil *userLimiter allows
// everything (the limit is off). Its map holds only users with open
// connections, so it is bounded by MaxConnections.
type userLimiter struct {
	max int

	mu sync.Mutex
	n  map[string]int
}

func newUserLimiter(max int) *userLimiter {
	if max < 0 {
		return nil
	}
	return &userLimiter{max: max, n: map[string]int{}}
}

// userKey identifies the user of c: the subject within its tenant.
func userKey(c *auth.Claims) string { return c.Tenant + "\x00" + c.Subject }

// full reports whether key is at the limit (a check without taking a slot).
func (l *userLimiter) full(key string) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[key] >= l.max
}

// acquire takes one of key's slots.
func (l *userLimiter) acquire(key string) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[key] >= l.max {
		return false
	}
	l.n[key]++
	return true
}

// release returns one of key's slots.
func (l *userLimiter) release(key string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[key] <= 1 {
		delete(l.n, key)
		return
	}
	l.n[key]--
}

// acquireUser takes a per-user slot for c's user; the connection keeps it
// until releaseUser.
func (s *Server) acquireUser(c *session.Conn, claims *auth.Claims) bool {
	key := userKey(claims)
	if !s.users.acquire(key) {
		s.metrics.limit(limitUserConns)
		return false
	}
	c.UserKey, c.HasUserSlot = key, true
	return true
}

// releaseUser returns c's per-user slot, if it holds one.
func (s *Server) releaseUser(c *session.Conn) {
	if c.HasUserSlot {
		c.HasUserSlot = false
		s.users.release(c.UserKey)
	}
}

// userLimitReason is the refusal of a connection beyond
// MaxConnectionsPerUser: too_many_connections, as 429 since only this user
// is over a bound.
func (s *Server) userLimitReason() session.Reason {
	r := session.ReasonTooManyConnections
	r.Status = 429
	r.Message = "too many connections for this user: close some before opening more"
	return r
}
