package ws

import (
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
)

// A WebSocket's token expiry runs on the connection's timer, not on the
// revalidation tick: the refresh push leaves RefreshAhead before exp (at
// once for a token already that close, such as one accepted inside
// ExpiryGrace), and a connection whose token was not replaced is closed
// ExpiryGrace after exp. The timer is the connection's one runtime timer
// (Conn.timersDue): it holds no goroutine while it waits, and is re-armed
// by connect and refresh.

// expiredMessage is the message of a WebSocket closed because its token
// ran out.
const expiredMessage = "the token expired and no refresh came: fetch a fresh token, then reconnect"

// expiryDue acts on the current token's exp: it closes the connection once
// exp + ExpiryGrace has passed, pushes refresh (once per token) within
// RefreshAhead of exp, and returns when to look again: 0 when there is
// no token with an exp, false when it closed the connection. It runs
// under timerMu (timersDue).
func (w *Conn) expiryDue(b *session.Bounds, now time.Time) (time.Duration, bool) {
	claims := w.c.Cur.Load()
	if claims == nil || claims.ExpiresAt.IsZero() {
		return 0, true
	}
	exp := claims.ExpiresAt
	end, ask := exp.Add(b.ExpiryGrace), exp.Add(-b.RefreshAhead)
	switch {
	case !now.Before(end):
		w.c.Close(session.WithMessage(session.ReasonTokenExpired, expiredMessage), 0)
		return 0, false
	case !now.Before(ask):
		if w.c.MarkAsked(exp) {
			w.c.AskRefresh(exp)
		}
		return end.Sub(now), true
	}
	return ask.Sub(now), true
}
