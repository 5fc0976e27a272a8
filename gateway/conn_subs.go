package gateway

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
	pending  bool   // the subscribe request is under way
	subToken string // the subscription token it was allowed with, for rechecks
}

// reservation says what became of a reserve.
type reservation int

const (
	reserved     reservation = iota // the channel is the request's to subscribe
	reserveTaken                    // the channel is subscribed, or being subscribed
	reserveFull                     // MaxSubscriptions are held
)

// reserve holds channel for a subscribe request with subToken.
func (c *Conn) reserve(channel, subToken string) reservation {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	if _, ok := c.subs[channel]; ok {
		return reserveTaken
	}
	if len(c.subs) >= c.srv.cfg.MaxSubscriptions {
		return reserveFull
	}
	if c.subs == nil {
		c.subs = make(map[string]*clientSub)
	}
	c.subs[channel] = &clientSub{pending: true, subToken: subToken}
	return reserved
}

// forget drops a subscription that did not come about.
func (c *Conn) forget(channel string) {
	c.subsMu.Lock()
	delete(c.subs, channel)
	c.subsMu.Unlock()
}

// made marks a reserved subscription made.
func (c *Conn) made(channel string) {
	c.subsMu.Lock()
	if s, ok := c.subs[channel]; ok {
		s.pending = false
	}
	c.subsMu.Unlock()
}

// unsubscribeState says what an unsubscribe request found.
type unsubscribeState int

const (
	unsubscribed  unsubscribeState = iota // the subscription is ended
	notSubscribed                         // there is none
	stillPending                          // it is still being made
)

// unsubscribe ends a subscription the client asked to end: the writer
// leaves the hub and replies to request id, after which no publication of
// the channel follows.
func (c *Conn) unsubscribe(id uint64, channel string) unsubscribeState {
	c.subsMu.Lock()
	s, ok := c.subs[channel]
	switch {
	case !ok:
		c.subsMu.Unlock()
		return notSubscribed
	case s.pending:
		c.subsMu.Unlock()
		return stillPending
	}
	delete(c.subs, channel)
	c.subsMu.Unlock()
	c.untrack(channel)
	c.pushCtl(ctlItem{kind: ctlUnsubscribe, id: id, channel: channel})
	return unsubscribed
}

// endSubscription ends one subscription from the server's side for r (a
// revoked grant, a lost history), leaving the others; the client is told
// (SSE: an "unsubscribed" event, WebSocket: an unsubscribed push). A
// subscription still being made is left alone; a channel not subscribed
// is left to the writer, which finds nothing to end. Any goroutine may
// call it; it never blocks.
func (c *Conn) endSubscription(channel string, r Reason) {
	c.subsMu.Lock()
	if s, ok := c.subs[channel]; ok && s.pending {
		c.subsMu.Unlock()
		return
	}
	delete(c.subs, channel)
	c.subsMu.Unlock()
	c.untrack(channel)
	c.pushCtl(ctlItem{kind: ctlEnd, channel: channel, reason: &r})
}

// heldSub is a subscription made, with its subscription token.
type heldSub struct{ channel, subToken string }

// heldSubs lists the subscriptions made by request.
func (c *Conn) heldSubs() []heldSub {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	list := make([]heldSub, 0, len(c.subs))
	for ch, s := range c.subs {
		if !s.pending {
			list = append(list, heldSub{ch, s.subToken})
		}
	}
	return list
}

// currentClaims returns the claims of the connection's current token, or
// nil while it has none (a WebSocket before connect).
func (c *Conn) currentClaims() *auth.Claims { return c.cur.Load() }

// askRefresh asks the client for a fresh token before exp: a "reauth"
// event (SSE) or a "refresh" push (WebSocket).
func (c *Conn) askRefresh(exp time.Time) { c.pushCtl(ctlItem{kind: ctlRefresh, exp: exp}) }
