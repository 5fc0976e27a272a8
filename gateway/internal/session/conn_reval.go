package session

import (
	"log/slog"
	"strings"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/subscriptions"
)

// Recheck is what a subscription rests on beyond the connection's token:
// a subscription token, until its exp and while its sid and jti are not
// revoked, or a webhook answer, re-asked when its TTL ends
// (Decision.RecheckAfter). A subscription allowed by a grant has none.
type Recheck struct {
	subToken string       // the subscription token it was allowed with, if any
	sub      *auth.Claims // that token's claims, when the subscription rests on it
	expiry   *time.Timer  // ends the subscription at sub's exp
	due      time.Time    // a webhook answer: when to re-authorize it
	running  bool         // a re-authorization is under way
}

// subTokenExpiredMessage is the message of a subscription ended because
// its subscription token expired.
const subTokenExpiredMessage = "the subscription token expired: subscribe again with a fresh one"

// MarkAsked records that the client was asked to refresh the token
// expiring at exp; it reports false when it had been already.
func (c *Conn) MarkAsked(exp time.Time) bool {
	c.revalMu.Lock()
	defer c.revalMu.Unlock()
	if c.askedExp.Equal(exp) {
		return false
	}
	c.askedExp = exp
	return true
}

// DueRechecks hands start each subscription whose re-authorization is
// due and not under way, with the subscription token it was allowed with,
// and marks it under way, until start returns false (no slot is free:
// the rest stay due). start must not block; it runs under the
// connection's revalidation lock.
func (c *Conn) DueRechecks(now time.Time, start func(channel, subToken string, rc *Recheck) bool) {
	c.revalMu.Lock()
	defer c.revalMu.Unlock()
	for ch, rc := range c.rechecks {
		if rc.sub != nil || rc.running || now.Before(rc.due) {
			continue
		}
		if !start(ch, rc.subToken, rc) {
			return
		}
		rc.running = true
	}
}

// Track records what channel's new subscription rests on, from the
// decision d that allowed it with subToken: the subscription token (its
// exp ends the subscription, to the millisecond, on a runtime timer), a
// webhook answer (re-authorized after d.RecheckAfter), or nothing beyond
// the connection's token (a grant).
func (c *Conn) Track(channel, subToken string, d subscriptions.Decision) {
	c.revalMu.Lock()
	defer c.revalMu.Unlock()
	c.setLocked(channel, subToken, d)
}

// setLocked makes d, an allow decision, what channel rests on. A
// subscription that keeps resting on the same subscription token keeps
// its timer.
func (c *Conn) setLocked(channel, subToken string, d subscriptions.Decision) {
	cur := c.rechecks[channel]
	switch {
	case d.SubToken != nil:
		if cur != nil && cur.sub != nil && cur.subToken == subToken {
			return
		}
		c.dropLocked(channel)
		rc := &Recheck{subToken: subToken, sub: d.SubToken}
		if !c.revalStopped {
			rc.expiry = time.AfterFunc(time.Until(d.SubToken.ExpiresAt), func() {
				c.credentialEnded(channel, rc, WithMessage(ReasonTokenExpired, subTokenExpiredMessage))
			})
		}
		c.putLocked(channel, rc)
	case d.RecheckAfter > 0:
		if cur == nil || cur.sub != nil {
			c.dropLocked(channel)
			cur = &Recheck{}
			c.putLocked(channel, cur)
		}
		cur.subToken, cur.due = subToken, time.Now().Add(d.RecheckAfter)
	default:
		c.dropLocked(channel)
	}
}

func (c *Conn) putLocked(channel string, rc *Recheck) {
	if c.rechecks == nil {
		c.rechecks = make(map[string]*Recheck)
	}
	c.rechecks[channel] = rc
}

// dropLocked forgets channel's recheck and stops its timer.
func (c *Conn) dropLocked(channel string) {
	if rc := c.rechecks[channel]; rc != nil {
		if rc.expiry != nil {
			rc.expiry.Stop()
		}
		delete(c.rechecks, channel)
	}
}

// untrack forgets channel's re-authorization (the subscription ended).
func (c *Conn) untrack(channel string) {
	c.revalMu.Lock()
	c.dropLocked(channel)
	c.revalMu.Unlock()
}

// stopRechecks stops every subscription token timer for good (the
// connection ended).
func (c *Conn) stopRechecks() {
	c.revalMu.Lock()
	defer c.revalMu.Unlock()
	c.revalStopped = true
	for ch := range c.rechecks {
		c.dropLocked(ch)
	}
}

// CheckCredentials ends, on the revalidation tick, every subscription
// whose subscription token is revoked in set (by sid or jti; reason
// revoked) or has reached its exp (token_expired; its timer does that to
// the millisecond, this is the backstop).
func (c *Conn) CheckCredentials(set *auth.RevocationSet, now time.Time) {
	type ended struct {
		channel string
		rc      *Recheck
		r       Reason
	}
	var ends []ended
	c.revalMu.Lock()
	for ch, rc := range c.rechecks {
		switch {
		case rc.sub == nil:
		case set.Revoked(rc.sub):
			ends = append(ends, ended{ch, rc, WithMessage(ReasonRevoked, "the subscription token was revoked")})
		case !now.Before(rc.sub.ExpiresAt):
			ends = append(ends, ended{ch, rc, WithMessage(ReasonTokenExpired, subTokenExpiredMessage)})
		}
	}
	c.revalMu.Unlock()
	for _, e := range ends {
		c.credentialEnded(e.channel, e.rc, e.r)
	}
}

// credentialEnded ends channel's subscription for r because rc, what it
// rested on, ended, unless rc was replaced meanwhile. The subscription may
// still be completing (Track runs in the writer's subscribe, after the hub
// subscription and before its reply): the end is queued behind it.
func (c *Conn) credentialEnded(channel string, rc *Recheck, r Reason) {
	c.revalMu.Lock()
	if c.rechecks[channel] != rc || c.Closed() {
		c.revalMu.Unlock()
		return
	}
	c.dropLocked(channel)
	c.revalMu.Unlock()
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	c.subs.del(channel)
	c.PushCtl(CtlItem{Kind: CtlEnd, Channel: channel, Reason: &r})
}

// Reauthorized applies the outcome of re-authorizing channel: an allow
// keeps the subscription, resting on what allowed it now, a denial or a
// failed check ends that subscription alone. expect is the recheck that
// asked, or nil (a WebSocket refresh); a recheck outdated meanwhile (the
// channel was unsubscribed, or subscribed anew) is dropped.
func (c *Conn) Reauthorized(channel, subToken string, expect *Recheck, d subscriptions.Decision, err error) {
	c.revalMu.Lock()
	cur := c.rechecks[channel]
	if expect != nil && cur != expect {
		c.revalMu.Unlock()
		return
	}
	if cur != nil {
		cur.running = false
	}
	if c.Closed() {
		c.revalMu.Unlock()
		return
	}
	var end Reason
	switch {
	case err != nil:
		c.dropLocked(channel)
		end = WithMessage(ReasonAuthorizationUnavailable, "cannot re-authorize the subscription now; subscribe again later")
	case d.Allowed:
		c.setLocked(channel, subToken, d)
	default:
		c.dropLocked(channel)
		end = DenialReason(d)
	}
	c.revalMu.Unlock()
	if err != nil {
		c.env.Counters.ReauthFailures.Inc()
		c.env.Log.Log(slog.LevelWarn, "gateway: re-authorization failed; ending the subscription",
			slog.Uint64("conn", c.ID), slog.String("channel", channel), slog.String("error", err.Error()))
	}
	if end.Code != "" {
		c.endSubscription(channel, end)
	}
}

// DenialReason is the typed reason of a denied subscription:
// authorization_unavailable when the webhook could not be asked (retry
// later), otherwise forbidden; the message is the authorizer's, safe to
// show.
func DenialReason(d subscriptions.Decision) Reason {
	if webhookUnavailable(d) {
		return WithMessage(ReasonAuthorizationUnavailable, d.Reason)
	}
	if d.Reason == "" {
		return ReasonForbidden
	}
	return WithMessage(ReasonForbidden, d.Reason)
}

// webhookUnavailable reports whether a denial came from a webhook that
// could not be asked: the authorizer's last resort, so its reason ends
// the decision's.
func webhookUnavailable(d subscriptions.Decision) bool {
	return !d.Allowed && strings.HasSuffix(d.Reason, subscriptions.ReasonWebhookUnavailable)
}
