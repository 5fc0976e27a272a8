package ws

import (
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
)

// A WebSocket's token expiry runs on a timer of its own, not on the
// revalidation tick: the refresh push leaves RefreshAhead before exp (at
// once for a token already that close, such as one accepted inside
// ExpiryGrace), and a connection whose token was not replaced is closed
// ExpiryGrace after exp. The timer is a runtime timer: it holds no
// goroutine while it waits, and is re-armed by connect and refresh.

// expiredMessage is the message of a WebSocket closed because its token
// ran out.
const expiredMessage = "the token expired and no refresh came: fetch a fresh token, then reconnect"

// armExpiry starts the expiry timer for the current token (connect),
// after the connect reply was queued, so the refresh push follows it.
func (w *Conn) armExpiry() {
	w.expMu.Lock()
	if w.expTimer == nil && !w.expStopped {
		w.expTimer = stoppedTimer(w.expiryDue)
	}
	w.expMu.Unlock()
	w.expiryDue()
}

// stopExpiry stops the timer for good (the connection ended).
func (w *Conn) stopExpiry() {
	w.expMu.Lock()
	defer w.expMu.Unlock()
	w.expStopped = true
	if w.expTimer != nil {
		w.expTimer.Stop()
	}
}

// expiryDue acts on the current token's exp: it closes the connection once
// exp + ExpiryGrace has passed, pushes refresh (once per token) within
// RefreshAhead of exp, and re-arms the timer for the next of these. It
// runs on the timer, and after connect and refresh.
func (w *Conn) expiryDue() {
	w.expMu.Lock()
	defer w.expMu.Unlock()
	claims := w.c.Cur.Load()
	if w.expStopped || w.expTimer == nil || claims == nil || claims.ExpiresAt.IsZero() || w.c.Closed() {
		return
	}
	exp, now := claims.ExpiresAt, time.Now()
	b := w.c.Bounds()
	end, ask := exp.Add(b.ExpiryGrace), exp.Add(-b.RefreshAhead)
	switch {
	case !now.Before(end):
		w.c.Close(session.WithMessage(session.ReasonTokenExpired, expiredMessage), 0)
	case !now.Before(ask):
		if w.c.MarkAsked(exp) {
			w.c.AskRefresh(exp)
		}
		w.expTimer.Reset(end.Sub(now))
	default:
		w.expTimer.Reset(ask.Sub(now))
	}
}
