package session

import (
	"time"

	"github.com/heraldgw/herald/auth"
)

// The subscriptions a client asks for by request (a WebSocket's
// subscribe): each is reserved while it is authorized and made, then held
// until the client or the server ends it. A stream subscribed as it
// opened (SSE) reserves none; its subscriptions are its hub keys alone.

// clientSub is one subscription a client asked for.
type clientSub struct {
	channel  string
	pending  bool   // the subscribe request is under way
	subToken string // the subscription token it was allowed with, for rechecks
}

// subSet holds a connection's client subscriptions: a slice scanned by
// channel, not a map, as most connections hold a few for their lifetime
// (a map would cost each a few hundred bytes).
type subSet []clientSub

// get returns channel's subscription, nil when there is none; valid until
// the set changes.
func (ss subSet) get(channel string) *clientSub {
	for i := range ss {
		if ss[i].channel == channel {
			return &ss[i]
		}
	}
	return nil
}

// del drops channel's subscription, if any.
func (ss *subSet) del(channel string) {
	s := *ss
	for i := range s {
		if s[i].channel == channel {
			last := len(s) - 1
			s[i] = s[last]
			s[last] = clientSub{}
			*ss = s[:last]
			return
		}
	}
}

// Reservation says what became of a reserve.
type Reservation int

const (
	Reserved     Reservation = iota // the channel is the request's to subscribe
	ReserveTaken                    // the channel is subscribed, or being subscribed
	ReserveFull                     // MaxSubscriptions are held
)

// Reserve holds channel for a subscribe request with subToken.
func (c *Conn) Reserve(channel, subToken string) Reservation {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	if c.subs.get(channel) != nil {
		return ReserveTaken
	}
	if len(c.subs) >= c.env.Bounds.MaxSubscriptions {
		return ReserveFull
	}
	c.subs = append(c.subs, clientSub{channel: channel, pending: true, subToken: subToken})
	return Reserved
}

// Forget drops a subscription that did not come about.
func (c *Conn) Forget(channel string) {
	c.subsMu.Lock()
	c.subs.del(channel)
	c.subsMu.Unlock()
}

// made marks a reserved subscription made, provided claims, those it was
// allowed with, are still the connection's current ones; it reports false
// when a refresh replaced them: the subscription stays pending, to be
// decided again. A refresh stores its claims before it lists the
// subscriptions to re-check (HeldSubs), so every subscription is decided
// with the new claims either here or by that refresh.
func (c *Conn) made(channel string, claims *auth.Claims) bool {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	if c.Cur.Load() != claims {
		return false
	}
	if s := c.subs.get(channel); s != nil {
		s.pending = false
	}
	return true
}

// UnsubscribeState says what an unsubscribe request found.
type UnsubscribeState int

const (
	Unsubscribed  UnsubscribeState = iota // the subscription is ended
	NotSubscribed                         // there is none
	StillPending                          // it is still being made
)

// Unsubscribe ends a subscription the client asked to end: the writer
// leaves the hub and replies to request id, after which no publication of
// the channel follows.
func (c *Conn) Unsubscribe(id uint64, channel string) UnsubscribeState {
	c.subsMu.Lock()
	s := c.subs.get(channel)
	switch {
	case s == nil:
		c.subsMu.Unlock()
		return NotSubscribed
	case s.pending:
		c.subsMu.Unlock()
		return StillPending
	}
	c.subs.del(channel)
	c.subsMu.Unlock()
	c.untrack(channel)
	c.PushCtl(CtlItem{Kind: CtlUnsubscribe, ID: id, Channel: channel})
	return Unsubscribed
}

// endSubscription ends one subscription from the server's side for r (a
// revoked grant, a lost history), leaving the others; the client is told
// (SSE: an "unsubscribed" event, WebSocket: an unsubscribed push). A
// subscription still being made is left alone; a channel not subscribed
// is left to the writer, which finds nothing to end. Any goroutine may
// call it; it never blocks.
func (c *Conn) endSubscription(channel string, r Reason) {
	c.subsMu.Lock()
	if s := c.subs.get(channel); s != nil && s.pending {
		c.subsMu.Unlock()
		return
	}
	c.subs.del(channel)
	c.subsMu.Unlock()
	c.untrack(channel)
	c.PushCtl(CtlItem{Kind: CtlEnd, Channel: channel, Reason: &r})
}

// HeldSub is a subscription made, with its subscription token.
type HeldSub struct{ Channel, SubToken string }

// HeldSubs lists the subscriptions made by request. A refresh calls it
// after it made its claims current: a subscription still being made then
// is decided again with them by the writer (made).
func (c *Conn) HeldSubs() []HeldSub {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	list := make([]HeldSub, 0, len(c.subs))
	for _, s := range c.subs {
		if !s.pending {
			list = append(list, HeldSub{s.channel, s.subToken})
		}
	}
	return list
}

// CurrentClaims returns the claims of the connection's current token, or
// nil while it has none (a WebSocket before connect).
func (c *Conn) CurrentClaims() *auth.Claims { return c.Cur.Load() }

// AskRefresh asks the client for a fresh token before exp: a "reauth"
// event (SSE) or a "refresh" push (WebSocket).
func (c *Conn) AskRefresh(exp time.Time) { c.PushCtl(CtlItem{Kind: CtlRefresh, Exp: exp}) }
