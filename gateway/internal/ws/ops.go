package ws

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/subscriptions"
)

// connectOp has the connection admitted (on a goroutine that ends once
// the client has nothing more to read, see readLoop). A refusal is answered with an error reply,
// then the connection closes.
func (w *Conn) connectOp(f *ClientFrame) {
	if w.connected.Load() {
		w.replyError(f.ID, OpConnect, CodeBadRequest, "already connected: send connect once per connection")
		return
	}
	ctx, cancel := w.connectContext()
	claims, reason, msg := w.connect(ctx, f.Token)
	cancel()
	if reason.Code != "" {
		w.refuseConnect(f.ID, reason, msg)
		return
	}

	// Room for one channel: most connections subscribe to few, and what
	// a connection holds it holds for its lifetime.
	w.c.Pos = session.NewPositions(claims.Tenant, 1)
	w.adopt(claims)
	w.startBeats()
	w.connected.Store(true)
	w.reply(f.ID, OpConnect, w.connectResult(claims, time.Now()))
	w.timersDue() // the token's expiry, after the connect reply
}

// connectContext is the context of the connection's admission: it ends
// at ConnectTimeout or when the connection closes. It is not derived
// from the connection's context (session.Conn.Ctx), which would keep a
// child map and a done channel for the connection's lifetime: a goroutine
// that lives as long as the admission ties the two.
func (w *Conn) connectContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), w.c.Bounds().ConnectTimeout)
	go func() {
		select {
		case <-w.c.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// connectResult is the reply to a successful connect at now.
func (w *Conn) connectResult(claims *auth.Claims, now time.Time) ConnectResult {
	b := w.c.Bounds()
	res := ConnectResult{
		Client:         uuid.NewString(),
		Protocol:       Protocol,
		Version:        w.env.Version,
		PingIntervalMS: b.HeartbeatInterval.Milliseconds(),
		PongTimeoutMS:  (b.ClientTimeout - b.HeartbeatInterval).Milliseconds(),
		ServerTimeMS:   now.UnixMilli(),
		ExpiresAt:      unixOrZero(claims.ExpiresAt),
		Limits: Limits{
			MaxMessageSize:   b.MaxMessageSize,
			MaxSubscriptions: b.MaxSubscriptions,
			MaxInflight:      b.MaxInflight,
		},
	}
	if !claims.ExpiresAt.IsZero() {
		res.ExpiresIn = max(0, int64(claims.ExpiresAt.Sub(now)/time.Second))
	}
	if b.HistorySize > 0 || b.HistoryTTL > 0 {
		res.History = &History{Size: b.HistorySize, TTLMS: b.HistoryTTL.Milliseconds()}
	}
	return res
}

// refuseConnect answers a failed connect with the error code of r and
// closes the connection for r.
func (w *Conn) refuseConnect(id uint64, r session.Reason, msg string) {
	if msg == "" {
		msg = r.Message
	}
	w.replyError(id, OpConnect, errorCode(r), msg)
	w.c.Close(session.WithMessage(r, msg), 0)
}

// errorCode is the error code of a request refused for r: the reason's
// own code when it is one, else server_error.
func errorCode(r session.Reason) string {
	if _, ok := ErrorCodes[r.Code]; ok {
		return r.Code
	}
	return CodeServerError
}

// noPublishGrants are those of every token without publish grants.
var noPublishGrants = &publishGrants{}

// adopt makes claims the connection's current token.
func (w *Conn) adopt(claims *auth.Claims) {
	if len(claims.Publish) == 0 {
		w.pubGrants.Store(noPublishGrants)
	} else {
		g, err := subscriptions.CompileGrants(claims.Publish, claims.Subject)
		w.pubGrants.Store(&publishGrants{grants: g, err: err})
	}
	w.c.Cur.Store(claims)
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

// subscribe authorizes a subscription (request goroutine) and hands it to
// the writer, which subscribes on the hub, recovers and replies.
func (w *Conn) subscribe(f *ClientFrame) {
	handedOff := false
	defer func() {
		if !handedOff {
			w.requestDone(f.ID)
		}
	}()
	ch, c := f.Channel, w.c
	switch c.Reserve(ch, f.Token) {
	case session.ReserveTaken:
		w.replyError(f.ID, OpSubscribe, CodeAlreadySubscribed, fmt.Sprintf("already subscribed to %q", ch))
		return
	case session.ReserveFull:
		w.limit(session.LimitSubscriptions)
		w.replyError(f.ID, OpSubscribe, CodeTooManySubscriptions, fmt.Sprintf(
			"at most %d subscriptions per connection: unsubscribe from one first", w.c.Bounds().MaxSubscriptions))
		return
	}

	// A refresh that lands while this is decided skips it (it re-checks
	// established subscriptions only), so decide again with the newer
	// token until the token did not change under the decision. One that
	// lands after, while the writer has yet to make the subscription,
	// has the writer decide again (session.SubscribeReq.Claims).
	authorize := func(ctx context.Context, claims *auth.Claims) (subscriptions.Decision, error) {
		return w.env.Authorize(ctx, subscriptions.Request{Claims: claims, Channel: ch, SubToken: f.Token})
	}
	claims := c.Cur.Load()
	d, err := authorize(c.Ctx, claims)
	for err == nil && d.Allowed && c.Ctx.Err() == nil {
		cur := c.Cur.Load()
		if cur == claims {
			break
		}
		claims = cur
		d, err = authorize(c.Ctx, claims)
	}
	switch {
	case c.Ctx.Err() != nil:
		c.Forget(ch)
		return
	case errors.Is(err, subscriptions.ErrInvalidName):
		c.Forget(ch)
		w.replyError(f.ID, OpSubscribe, CodeBadRequest, err.Error())
		return
	case err != nil:
		c.Forget(ch)
		w.logError("gateway: authorize failed", err, slog.String("tenant", claims.Tenant))
		w.replyError(f.ID, OpSubscribe, CodeServerError, "cannot authorize the subscription now; retry later")
		return
	case !d.Allowed:
		c.Forget(ch)
		msg := d.Reason
		if msg == "" {
			msg = fmt.Sprintf("channel %q is not allowed", ch)
		}
		w.replyError(f.ID, OpSubscribe, errorCode(session.DenialReason(d)), msg)
		return
	}
	id := f.ID
	req := &session.SubscribeReq{
		SubToken: f.Token, Decision: d, Claims: claims, Authorize: authorize,
		Done: func() { w.requestDone(id) },
	}
	if f.Since != nil {
		req.Since = &fanout.Position{Offset: f.Since.Offset, Epoch: f.Since.Epoch}
	}
	if c.PushCtl(session.CtlItem{Kind: session.CtlSubscribe, ID: id, Channel: ch, Sub: req}) {
		handedOff = true
	} else {
		c.Forget(ch)
	}
}

// unsubscribe ends a subscription (on the goroutine the reader waits
// for); the writer leaves the hub and replies, after which no publication
// of the channel follows.
func (w *Conn) unsubscribe(f *ClientFrame) {
	switch w.c.Unsubscribe(f.ID, f.Channel) {
	case session.NotSubscribed:
		w.replyError(f.ID, OpUnsubscribe, CodeNotSubscribed, fmt.Sprintf("not subscribed to %q", f.Channel))
	case session.StillPending:
		w.replyError(f.ID, OpUnsubscribe, CodeNotSubscribed, fmt.Sprintf(
			"the subscription to %q is still being made: wait for its reply", f.Channel))
	}
}

// publish publishes a client message on an interactive channel the
// token's publish grants allow (request goroutine).
func (w *Conn) publish(f *ClientFrame) {
	defer w.requestDone(f.ID)
	claims, pg := w.c.Cur.Load(), w.pubGrants.Load()
	switch {
	case pg.err != nil:
		w.replyError(f.ID, OpPublish, CodeForbidden, "the token holds an invalid publish grant: "+pg.err.Error())
		return
	case !pg.grants.Allows(f.Channel):
		w.replyError(f.ID, OpPublish, CodeForbidden, fmt.Sprintf("no publish grant for channel %q", f.Channel))
		return
	}
	if w.env.Publish == nil {
		w.replyError(f.ID, OpPublish, CodeForbidden, "publishing is not available on this server")
		return
	}
	pub, err := w.env.Publish(w.c.Ctx, fanout.Message{
		ID:            uuid.NewString(),
		Key:           fanout.Key{Tenant: claims.Tenant, Channel: f.Channel},
		Type:          f.Type,
		SchemaVersion: f.SchemaVersion,
		Time:          time.Now(),
		Data:          f.Data,
	})
	switch {
	case w.c.Ctx.Err() != nil:
		return
	case errors.Is(err, fanout.ErrInvalidMessage):
		w.replyError(f.ID, OpPublish, CodeBadRequest, err.Error())
		return
	case err != nil:
		w.logError("gateway: client publish failed", err, slog.String("tenant", claims.Tenant))
		w.replyError(f.ID, OpPublish, CodeServerError, "the broker did not accept the publication; retry later")
		return
	}
	w.reply(f.ID, OpPublish, PublishResult{ID: pub.ID, Offset: pub.Offset, Epoch: pub.Epoch})
}

// refresh replaces the connection's token with a fresh one for the same
// subject and tenant (request goroutine), then re-checks every
// subscription against it: one the new token no longer allows ends with
// an unsubscribed push. The revalidation timer reads the new token's exp
// from then on.
func (w *Conn) refresh(f *ClientFrame) {
	defer w.requestDone(f.ID)
	claims, reason, msg := w.env.Refresh(f.Token)
	switch reason.Code {
	case "":
	case session.ReasonTokenExpired.Code:
		w.replyError(f.ID, OpRefresh, CodeTokenExpired, "the new token has expired already")
		return
	case session.ReasonRevoked.Code:
		w.replyError(f.ID, OpRefresh, CodeRevoked, msg)
		return
	default:
		w.replyError(f.ID, OpRefresh, CodeUnauthorized, msg)
		return
	}
	cur := w.c.Cur.Load()
	if claims.Subject != cur.Subject || claims.Tenant != cur.Tenant {
		w.replyError(f.ID, OpRefresh, CodeForbidden,
			"the new token is for another subject or tenant: open a new connection with it")
		return
	}
	w.adopt(claims)
	w.reply(f.ID, OpRefresh, RefreshResult{ExpiresAt: unixOrZero(claims.ExpiresAt)})
	w.timersDue() // the new token's expiry
	w.recheck(claims)
}

// recheck re-authorizes every subscription with claims.
func (w *Conn) recheck(claims *auth.Claims) {
	c := w.c
	for _, e := range c.HeldSubs() {
		d, err := w.env.Authorize(c.Ctx, subscriptions.Request{
			Claims: claims, Channel: e.Channel, SubToken: e.SubToken, Live: true,
		})
		if c.Ctx.Err() != nil {
			return
		}
		c.Reauthorized(e.Channel, e.SubToken, nil, d, err)
	}
}
