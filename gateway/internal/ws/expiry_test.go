package ws_test

import (
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// expiryBounds are bounds with RefreshAhead ahead and ExpiryGrace grace.
// There is no revalidation tick here: whatever happens at a token's
// expiry is the connection's own timer.
func expiryBounds(ahead, grace time.Duration) session.Bounds {
	return session.Bounds{RefreshAhead: ahead, ExpiryGrace: grace}
}

// TestWSRefreshPushAtRefreshAhead: the refresh push leaves RefreshAhead
// before exp, not at a revalidation tick (an hour away here).
func TestWSRefreshPushAtRefreshAhead(t *testing.T) {
	t.Parallel()
	const ahead = 3 * time.Hour
	e := newEnv(t, envOptions{bounds: expiryBounds(ahead, 5*time.Second)})
	exp := time.Now().Add(ahead + time.Second).Truncate(time.Second).Add(time.Second)
	tok := e.mint("u1", exp, []string{"orders/*"}, nil)
	c := e.dialWS(wstest.DialOpts{})
	if res := c.Connect(tok); res.ExpiresIn <= int64(ahead/time.Second) {
		t.Fatalf("connect result %+v: expires_in ≤ RefreshAhead", res)
	}
	p := wstest.RefreshPush(t, c.NextFrame(time.Minute))
	if left := time.Until(exp); left > ahead {
		t.Fatalf("refresh pushed %s before exp, want within RefreshAhead (%s)", left, ahead)
	}
	if p.ExpiresAt != exp.Unix() || p.ExpiresInMS > ahead.Milliseconds() || p.GraceMS != 5000 {
		t.Fatalf("refresh push %+v", p)
	}
	c.OK(c.Request(ws.OpPing, nil), nil) // one push per token, and the connection goes on
}

// TestWSRefreshPushInsideGrace: a token already past its exp, accepted
// inside ExpiryGrace, gets its refresh push right after the connect reply
// and, not replaced, closes the connection with token_expired
// ExpiryGrace after exp, on the connection's timer.
func TestWSRefreshPushInsideGrace(t *testing.T) {
	t.Parallel()
	const grace = 8 * time.Second // the connect must land inside it, on a busy machine too
	e := newEnv(t, envOptions{
		bounds: expiryBounds(3*time.Hour, grace),
		leeway: time.Minute, // the clock skew a deployment allows
	})
	exp := time.Now().Truncate(time.Second).Add(-time.Second)
	tok, err := auth.MintHS256(testSecret, auth.Claims{Subject: "u1", Tenant: "acme", ExpiresAt: exp})
	if err != nil {
		t.Fatal(err)
	}
	c := e.dialWS(wstest.DialOpts{})
	if res := c.Connect(tok); res.ExpiresAt != exp.Unix() || res.ExpiresIn != 0 {
		t.Fatalf("connect result %+v, want expires_at %d and expires_in 0", res, exp.Unix())
	}
	p := wstest.RefreshPush(t, c.NextFrame(time.Minute))
	if p.ExpiresAt != exp.Unix() || p.ExpiresInMS != 0 || p.GraceMS != grace.Milliseconds() {
		t.Fatalf("refresh push %+v", p)
	}
	c.ClosedWith(session.ReasonTokenExpired.Code, session.CloseTokenExpired)
	if early := time.Until(exp.Add(grace)); early > 0 {
		t.Fatalf("closed %s before exp + ExpiryGrace", early)
	}
}
