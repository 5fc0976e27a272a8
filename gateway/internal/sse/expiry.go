package sse

import (
	"sync"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
)

// A stream's token expiry runs on a timer of the stream's own, to the
// millisecond, whatever the revalidation interval: the stream gets a
// "reauth" event RefreshAhead before its token's exp (at once for a token
// already that close) and goes on delivering; ExpiryLead before exp it
// ends with "reauth" then "disconnect" (token_expired), so nothing is
// delivered on a token that has expired. The timer is a runtime timer:
// it holds no goroutine while it waits. A stream's token never changes, so
// it is armed once.

// ExpiryLead is how long before its token's exp a stream ends.
const ExpiryLead = 500 * time.Millisecond

// expiredMessage is the message of a stream ended because its token is
// about to expire.
func expiredMessage(exp time.Time) string {
	return "the token expires at " + exp.UTC().Format(time.RFC3339) +
		": fetch a fresh token (or ticket) and open a new stream with last_event_id"
}

// expiry is a stream's expiry timer.
type expiry struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// ArmExpiry starts the stream's expiry timer, once the stream is written
// to (its head queued), so the reauth and disconnect events follow it.
func (sc *Stream) ArmExpiry() {
	sc.exp.mu.Lock()
	if sc.exp.timer == nil && !sc.exp.stopped {
		sc.exp.timer = time.AfterFunc(time.Hour, sc.expiryDue)
		sc.exp.timer.Stop()
	}
	sc.exp.mu.Unlock()
	sc.expiryDue()
}

// stopExpiry stops the timer for good (the stream ended).
func (sc *Stream) stopExpiry() {
	sc.exp.mu.Lock()
	defer sc.exp.mu.Unlock()
	sc.exp.stopped = true
	if sc.exp.timer != nil {
		sc.exp.timer.Stop()
	}
}

// expiryDue acts on the token's exp: it ends the stream once within
// ExpiryLead of exp, asks for a fresh token (once) within RefreshAhead of
// it, and re-arms the timer for the next of these.
func (sc *Stream) expiryDue() {
	sc.exp.mu.Lock()
	defer sc.exp.mu.Unlock()
	c := sc.Conn
	exp := c.Claims.ExpiresAt
	if sc.exp.stopped || sc.exp.timer == nil || exp.IsZero() || c.Closed() {
		return
	}
	now := time.Now()
	end, ask := exp.Add(-ExpiryLead), exp.Add(-c.Bounds().RefreshAhead)
	switch {
	case !now.Before(end):
		c.Close(session.WithMessage(session.ReasonTokenExpired, expiredMessage(exp)), 0)
	case !now.Before(ask):
		if c.MarkAsked(exp) {
			c.AskRefresh(exp)
		}
		sc.exp.timer.Reset(end.Sub(now))
	default:
		sc.exp.timer.Reset(ask.Sub(now))
	}
}
