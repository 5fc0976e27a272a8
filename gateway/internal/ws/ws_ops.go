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

// connect authenticates the connection (on the goroutine the reader waits
// for, see handleApart). A failure is answered with an error reply, then
// the connection closes.
func (w *Conn) connect(f *ClientFrame) {
	if w.connected.Load() {
		w.replyError(f.ID, OpConnect, CodeBadRequest, "already connected: send connect once per connection")
		return
	}
	var claims *auth.Claims
	source := SourceFrame
	switch {
	case f.Token != "":
		var reason session.Reason
		var msg string
		if claims, reason, msg = w.env.Server.VerifyToken(f.Token, source); reason.Code != "" {
			w.refuseConnect(f.ID, reason, msg)
			return
		}
	case w.hc.Reason.Code != "":
		w.refuseConnect(f.ID, w.hc.Reason, w.hc.Msg)
		return
	case w.hc.Ticket != "":
		// Redeemed only now that connect relies on it (it is spent even if
		// the connect is refused below: see redeemTicket).
		ctx, cancel := context.WithTimeout(w.c.Ctx, w.env.Config.ConnectTimeout)
		var reason session.Reason
		var msg string
		claims, reason, msg = w.env.Server.RedeemTicket(ctx, w.hc.Ticket)
		cancel()
		if reason.Code != "" {
			w.refuseConnect(f.ID, reason, msg)
			return
		}
		source = SourceTicket
	case w.hc.Claims != nil:
		claims, source = w.hc.Claims, w.hc.Source
	default:
		w.refuseConnect(f.ID, session.ReasonUnauthorized, fmt.Sprintf(
			"no token: put it in the connect frame's token field, or send it with the upgrade request "+
				"(Authorization: Bearer, the %s cookie, a ticket or the access_token query parameter)", w.env.Config.CookieName))
		return
	}
	if reason, msg := w.env.Server.Admit(claims, source, w.env.Config.ExpiryGrace); reason.Code != "" {
		w.refuseConnect(f.ID, reason, msg)
		return
	}
	if !w.env.Server.AcquireUser(w.c, claims) {
		w.refuseConnect(f.ID, w.env.Server.UserLimitReason(), "")
		return
	}

	w.c.Claims = claims
	w.c.Pos = session.NewPositions(claims.Tenant, 4)
	w.adopt(claims)
	w.connected.Store(true)
	w.connectTimer.Stop()
	w.c.StartHeartbeat()
	w.opened = true
	w.env.Server.Opened(w.c)
	w.reply(f.ID, OpConnect, w.connectResult(claims, time.Now()))
	w.armExpiry()
}

// connectResult is the reply to a successful connect at now.
func (w *Conn) connectResult(claims *auth.Claims, now time.Time) ConnectResult {
	res := ConnectResult{
		Client:         w.clientID,
		Protocol:       Protocol,
		Version:        w.env.Config.Version,
		PingIntervalMS: w.env.Config.HeartbeatInterval.Milliseconds(),
		PongTimeoutMS:  (w.env.Config.ClientTimeout - w.env.Config.HeartbeatInterval).Milliseconds(),
		ServerTimeMS:   now.UnixMilli(),
		ExpiresAt:      unixOrZero(claims.ExpiresAt),
		Limits: Limits{
			MaxMessageSize:   w.env.Config.MaxMessageSize,
			MaxSubscriptions: w.env.Config.MaxSubscriptions,
			MaxInflight:      w.env.Config.MaxInflight,
		},
	}
	if !claims.ExpiresAt.IsZero() {
		res.ExpiresIn = max(0, int64(claims.ExpiresAt.Sub(now)/time.Second))
	}
	if w.env.Config.HistorySize > 0 || w.env.Config.HistoryTTL > 0 {
		res.History = &History{Size: w.env.Config.HistorySize, TTLMS: w.env.Config.HistoryTTL.Milliseconds()}
	}
	return res
}

// refuseConnect answers a failed connect with the error code of r and
// closes the connection for r.
func (w *Conn) refuseConnect(id uint64, r session.Reason, msg string) {
	if msg == "" {
		msg = r.Message
	}
	w.replyError(id, OpConnect, wsErrorCode(r), msg)
	w.c.Close(session.WithMessage(r, msg), 0)
}

// wsErrorCode is the error code of a request refused for r: the reason's
// own code when it is one, else server_error.
func wsErrorCode(r session.Reason) string {
	if _, ok := ErrorCodes[r.Code]; ok {
		return r.Code
	}
	return CodeServerError
}

// adopt makes claims the connection's current token.
func (w *Conn) adopt(claims *auth.Claims) {
	g, err := subscriptions.CompileGrants(claims.Publish, claims.Subject)
	w.pubGrants.Store(&publishGrants{grants: g, err: err})
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
		w.env.Server.Limit(LimitSubscriptions)
		w.replyError(f.ID, OpSubscribe, CodeTooManySubscriptions, fmt.Sprintf(
			"at most %d subscriptions per connection: unsubscribe from one first", w.env.Config.MaxSubscriptions))
		return
	}

	// A refresh that lands while this is decided skips it (it re-checks
	// established subscriptions only), so decide again with the newer
	// token until the token did not change under the decision. One that
	// lands after, while the writer has yet to make the subscription,
	// has the writer decide again (session.SubscribeReq.Claims).
	authorize := func(ctx context.Context, claims *auth.Claims) (subscriptions.Decision, error) {
		return w.env.Server.Authorize(ctx, subscriptions.Request{Claims: claims, Channel: ch, SubToken: f.Token})
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
		w.replyError(f.ID, OpSubscribe, wsErrorCode(session.DenialReason(d)), msg)
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
	p := w.env.Server.Publisher()
	if p == nil {
		w.replyError(f.ID, OpPublish, CodeForbidden, "publishing is not available on this server")
		return
	}
	pub, err := p.Publish(w.c.Ctx, fanout.Message{
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
	claims, reason, msg := w.env.Server.VerifyToken(f.Token, "refresh")
	if reason.Code == "" {
		reason, msg = w.env.Server.Admit(claims, "refresh", w.env.Config.ExpiryGrace)
	}
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
	w.expiryDue()
	w.recheck(claims)
}

// recheck re-authorizes every subscription with claims.
func (w *Conn) recheck(claims *auth.Claims) {
	c := w.c
	for _, e := range c.HeldSubs() {
		d, err := w.env.Server.Authorize(c.Ctx, subscriptions.Request{
			Claims: claims, Channel: e.Channel, SubToken: e.SubToken, Live: true,
		})
		if c.Ctx.Err() != nil {
			return
		}
		c.Reauthorized(e.Channel, e.SubToken, nil, d, err)
	}
}
