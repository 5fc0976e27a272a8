package gateway

import (
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
)

// maxIPBuckets bounds the addresses the connection-attempt limiter tracks
// (about 64 bytes each).
const maxIPBuckets = 1 << 16

// ipLimiter is a token bucket per client address (an IPv4 address or an
// IPv6 /64, since one host usually holds a whole /64), bounding how fast
// one address may open connections. Its map is bounded: when it is full,
// buckets that have refilled are forgotten first (they hold no state worth
// keeping), then arbitrary ones.
type ipLimiter struct {
	rate  float64 // tokens per second
	burst float64
	max   int
	now   func() time.Time // time.Now; tests replace it

	mu      sync.Mutex
	buckets map[netip.Addr]ipBucket
}

type ipBucket struct {
	tokens float64
	last   time.Time
}

func newIPLimiter(rate float64, burst, max int) *ipLimiter {
	return &ipLimiter{
		rate: rate, burst: float64(burst), max: max, now: time.Now,
		buckets: make(map[netip.Addr]ipBucket),
	}
}

// allow takes one token for addr. When none is left it reports how long
// until one is.
func (l *ipLimiter) allow(addr netip.Addr) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.buckets[addr]
	if !ok {
		if len(l.buckets) >= l.max {
			l.evict(now)
		}
		b = ipBucket{tokens: l.burst, last: now}
	}
	if elapsed := now.Sub(b.last).Seconds(); elapsed > 0 {
		b.tokens = math.Min(l.burst, b.tokens+elapsed*l.rate)
	}
	b.last = now
	allowed := b.tokens >= 1
	if allowed {
		b.tokens--
	}
	l.buckets[addr] = b
	if allowed {
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// evict makes room for at least one bucket: first every bucket that has
// refilled since it was last used, then, if none had, a sixteenth of the
// map (Go's map order is random).
func (l *ipLimiter) evict(now time.Time) {
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	for a, b := range l.buckets {
		if now.Sub(b.last) >= full {
			delete(l.buckets, a)
		}
	}
	if len(l.buckets) < l.max {
		return
	}
	n := max(1, l.max/16)
	for a := range l.buckets {
		if n == 0 {
			break
		}
		delete(l.buckets, a)
		n--
	}
}

// clientAddr is the limiter key of a request: its client's IP (clientOf:
// the TCP peer, or the address a trusted proxy forwarded), IPv6 masked to
// /64. ok is false when the request has no client IP (then no limit
// applies).
func clientAddr(r *http.Request) (netip.Addr, bool) {
	a := clientOf(r).addr
	if !a.IsValid() {
		return netip.Addr{}, false
	}
	if a.Is6() {
		p, err := a.Prefix(64)
		if err != nil {
			return netip.Addr{}, false
		}
		a = p.Addr()
	}
	return a, true
}

// limitAttempts refuses, with 429 and Retry-After, a connection attempt
// beyond the per-address rate (ConnectAttemptsPerIP) before h runs, and
// so before h could spend a ticket. transport labels the refusal in
// herald_connect_refusals_total; "" (POST /v1/tickets) counts none.
func (s *Server) limitAttempts(transport string, h http.HandlerFunc) http.HandlerFunc {
	if s.attempts == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if addr, ok := clientAddr(r); ok {
			if allowed, wait := s.attempts.allow(addr); !allowed {
				secs := max(1, int(math.Ceil(wait.Seconds())))
				w.Header().Set("Retry-After", strconv.Itoa(secs))
				s.metrics.limit(limitConnectRate)
				if transport != "" {
					s.metrics.refused(transport, session.ReasonTooManyRequests)
				}
				s.refused(w, r, session.ReasonTooManyRequests, "")
				return
			}
		}
		h(w, r)
	}
}
