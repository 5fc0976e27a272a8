package gateway

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
func (w *wsConn) connect(f *clientFrame) {
	if w.connected.Load() {
		w.replyError(f.ID, opConnect, codeBadRequest, "already connected: send connect once per connection")
		return
	}
	var claims *auth.Claims
	source := sourceFrame
	switch {
	case f.Token != "":
		var reason Reason
		var msg string
		if claims, reason, msg = w.srv.verifyToken(f.Token, source); reason.Code != "" {
			w.refuseConnect(f.ID, reason, msg)
			return
		}
	case w.hc.reason.Code != "":
		w.refuseConnect(f.ID, w.hc.reason, w.hc.msg)
		return
	case w.hc.ticket != "":
		// Redeemed only now that connect relies on it (it is spent even if
		// the connect is refused below: see redeemTicket).
		ctx, cancel := context.WithTimeout(w.c.Ctx, w.cfg.ConnectTimeout)
		var reason Reason
		var msg string
		claims, reason, msg = w.srv.redeemTicket(ctx, w.hc.ticket)
		cancel()
		if reason.Code != "" {
			w.refuseConnect(f.ID, reason, msg)
			return
		}
		source = sourceTicket
	case w.hc.claims != nil:
		claims, source = w.hc.claims, w.hc.source
	default:
		w.refuseConnect(f.ID, ReasonUnauthorized, fmt.Sprintf(
			"no token: put it in the connect frame's token field, or send it with the upgrade request "+
				"(Authorization: Bearer, the %s cookie, a ticket or the access_token query parameter)", w.cfg.CookieName))
		return
	}
	if reason, msg := w.srv.admit(claims, source, w.cfg.ExpiryGrace); reason.Code != "" {
		w.refuseConnect(f.ID, reason, msg)
		return
	}
	if !w.srv.acquireUser(w.c, claims) {
		w.refuseConnect(f.ID, w.srv.userLimitReason(), "")
		return
	}

	w.c.Claims = claims
	w.c.Pos = session.NewPositions(claims.Tenant, 4)
	w.adopt(claims)
	w.connected.Store(true)
	w.connectTimer.Stop()
	w.c.StartHeartbeat()
	w.opened = true
	w.srv.opened(w.c)
	w.reply(f.ID, opConnect, w.connectResult(claims, time.Now()))
	w.armExpiry()
}

// connectResult is the reply to a successful connect at now.
func (w *wsConn) connectResult(claims *auth.Claims, now time.Time) wsConnectResult {
	res := wsConnectResult{
		Client:         w.clientID,
		Protocol:       wsProtocol,
		Version:        w.cfg.Version,
		PingIntervalMS: w.cfg.HeartbeatInterval.Milliseconds(),
		PongTimeoutMS:  (w.cfg.ClientTimeout - w.cfg.HeartbeatInterval).Milliseconds(),
		ServerTimeMS:   now.UnixMilli(),
		ExpiresAt:      unixOrZero(claims.ExpiresAt),
		Limits: wsLimits{
			MaxMessageSize:   w.cfg.MaxMessageSize,
			MaxSubscriptions: w.cfg.MaxSubscriptions,
			MaxInflight:      w.cfg.MaxInflight,
		},
	}
	if !claims.ExpiresAt.IsZero() {
		res.ExpiresIn = max(0, int64(claims.ExpiresAt.Sub(now)/time.Second))
	}
	if w.cfg.HistorySize > 0 || w.cfg.HistoryTTL > 0 {
		res.History = &wsHistory{Size: w.cfg.HistorySize, TTLMS: w.cfg.HistoryTTL.Milliseconds()}
	}
	return res
}

// refuseConnect answers a failed connect with the error code of r and
// closes the connection for r.
func (w *wsConn) refuseConnect(id uint64, r Reason, msg string) {
	if msg == "" {
		msg = r.Message
	}
	w.replyError(id, opConnect, wsErrorCode(r), msg)
	w.c.Close(session.WithMessage(r, msg), 0)
}

// wsErrorCode is the error code of a request refused for r: the reason's
// own code when it is one, else server_error.
func wsErrorCode(r Reason) string {
	if _, ok := wsErrorCodes[r.Code]; ok {
		return r.Code
	}
	return codeServerError
}

// adopt makes claims the connection's current token.
func (w *wsConn) adopt(claims *auth.Claims) {
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
func (w *wsConn) subscribe(f *clientFrame) {
	handedOff := false
	defer func() {
		if !handedOff {
			w.requestDone(f.ID)
		}
	}()
	ch, c := f.Channel, w.c
	switch c.Reserve(ch, f.Token) {
	case session.ReserveTaken:
		w.replyError(f.ID, opSubscribe, codeAlreadySubscribed, fmt.Sprintf("already subscribed to %q", ch))
		return
	case session.ReserveFull:
		w.srv.metrics.limit(limitSubscriptions)
		w.replyError(f.ID, opSubscribe, codeTooManySubscriptions, fmt.Sprintf(
			"at most %d subscriptions per connection: unsubscribe from one first", w.cfg.MaxSubscriptions))
		return
	}

	// A refresh that lands while this is decided skips it (it re-checks
	// established subscriptions only), so decide again with the newer
	// token until the token did not change under the decision.
	claims := c.Cur.Load()
	d, err := w.srv.deps.Authorizer.Authorize(c.Ctx, subscriptions.Request{Claims: claims, Channel: ch, SubToken: f.Token})
	for err == nil && d.Allowed && c.Ctx.Err() == nil {
		cur := c.Cur.Load()
		if cur == claims {
			break
		}
		claims = cur
		d, err = w.srv.deps.Authorizer.Authorize(c.Ctx, subscriptions.Request{Claims: claims, Channel: ch, SubToken: f.Token})
	}
	switch {
	case c.Ctx.Err() != nil:
		c.Forget(ch)
		return
	case errors.Is(err, subscriptions.ErrInvalidName):
		c.Forget(ch)
		w.replyError(f.ID, opSubscribe, codeBadRequest, err.Error())
		return
	case err != nil:
		c.Forget(ch)
		w.logError("gateway: authorize failed", err, slog.String("tenant", claims.Tenant))
		w.replyError(f.ID, opSubscribe, codeServerError, "cannot authorize the subscription now; retry later")
		return
	case !d.Allowed:
		c.Forget(ch)
		msg := d.Reason
		if msg == "" {
			msg = fmt.Sprintf("channel %q is not allowed", ch)
		}
		w.replyError(f.ID, opSubscribe, wsErrorCode(session.DenialReason(d)), msg)
		return
	}
	id := f.ID
	req := &session.SubscribeReq{SubToken: f.Token, RecheckAfter: d.RecheckAfter, Done: func() { w.requestDone(id) }}
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
func (w *wsConn) unsubscribe(f *clientFrame) {
	switch w.c.Unsubscribe(f.ID, f.Channel) {
	case session.NotSubscribed:
		w.replyError(f.ID, opUnsubscribe, codeNotSubscribed, fmt.Sprintf("not subscribed to %q", f.Channel))
	case session.StillPending:
		w.replyError(f.ID, opUnsubscribe, codeNotSubscribed, fmt.Sprintf(
			"the subscription to %q is still being made: wait for its reply", f.Channel))
	}
}

// publish publishes a client message on an interactive channel the
// token's publish grants allow (request goroutine).
func (w *wsConn) publish(f *clientFrame) {
	defer w.requestDone(f.ID)
	claims, pg := w.c.Cur.Load(), w.pubGrants.Load()
	switch {
	case pg.err != nil:
		w.replyError(f.ID, opPublish, codeForbidden, "the token holds an invalid publish grant: "+pg.err.Error())
		return
	case !pg.grants.Allows(f.Channel):
		w.replyError(f.ID, opPublish, codeForbidden, fmt.Sprintf("no publish grant for channel %q", f.Channel))
		return
	}
	p := w.srv.publisher()
	if p == nil {
		w.replyError(f.ID, opPublish, codeForbidden, "publishing is not available on this server")
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
		w.replyError(f.ID, opPublish, codeBadRequest, err.Error())
		return
	case err != nil:
		w.logError("gateway: client publish failed", err, slog.String("tenant", claims.Tenant))
		w.replyError(f.ID, opPublish, codeServerError, "the broker did not accept the publication; retry later")
		return
	}
	w.reply(f.ID, opPublish, wsPublishResult{ID: pub.ID, Offset: pub.Offset, Epoch: pub.Epoch})
}

// refresh replaces the connection's token with a fresh one for the same
// subject and tenant (request goroutine), then re-checks every
// subscription against it: one the new token no longer allows ends with
// an unsubscribed push. The revalidation timer reads the new token's exp
// from then on.
func (w *wsConn) refresh(f *clientFrame) {
	defer w.requestDone(f.ID)
	claims, reason, msg := w.srv.verifyToken(f.Token, "refresh")
	if reason.Code == "" {
		reason, msg = w.srv.admit(claims, "refresh", w.cfg.ExpiryGrace)
	}
	switch reason.Code {
	case "":
	case ReasonTokenExpired.Code:
		w.replyError(f.ID, opRefresh, codeTokenExpired, "the new token has expired already")
		return
	case ReasonRevoked.Code:
		w.replyError(f.ID, opRefresh, codeRevoked, msg)
		return
	default:
		w.replyError(f.ID, opRefresh, codeUnauthorized, msg)
		return
	}
	cur := w.c.Cur.Load()
	if claims.Subject != cur.Subject || claims.Tenant != cur.Tenant {
		w.replyError(f.ID, opRefresh, codeForbidden,
			"the new token is for another subject or tenant: open a new connection with it")
		return
	}
	w.adopt(claims)
	w.reply(f.ID, opRefresh, wsRefreshResult{ExpiresAt: unixOrZero(claims.ExpiresAt)})
	w.expiryDue()
	w.recheck(claims)
}

// recheck re-authorizes every subscription with claims.
func (w *wsConn) recheck(claims *auth.Claims) {
	c := w.c
	for _, e := range c.HeldSubs() {
		d, err := w.srv.deps.Authorizer.Authorize(c.Ctx, subscriptions.Request{
			Claims: claims, Channel: e.Channel, SubToken: e.SubToken,
		})
		if c.Ctx.Err() != nil {
			return
		}
		c.Reauthorized(e.Channel, e.SubToken, nil, d, err)
	}
}
