package session

import (
	"log/slog"
	"strings"
	"time"

	"github.com/heraldgw/herald/subscriptions"
)

// Recheck is a subscription whose authorization lapses: one allowed by a
// subscription token or by the webhook (Decision.RecheckAfter > 0).
type Recheck struct {
	subToken string    // the subscription token it was allowed with, if any
	due      time.Time // when to re-authorize it
	running  bool      // a re-authorization is under way
}

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
		if rc.running || now.Before(rc.due) {
			continue
		}
		if !start(ch, rc.subToken, rc) {
			return
		}
		rc.running = true
	}
}

// Track schedules the re-authorization of channel after d, or forgets it
// when d is not positive (a grant decision lasts as long as the token).
func (c *Conn) Track(channel, subToken string, d time.Duration) {
	c.revalMu.Lock()
	defer c.revalMu.Unlock()
	if d <= 0 {
		delete(c.rechecks, channel)
		return
	}
	if c.rechecks == nil {
		c.rechecks = make(map[string]*Recheck)
	}
	c.rechecks[channel] = &Recheck{subToken: subToken, due: time.Now().Add(d)}
}

// untrack forgets channel's re-authorization (the subscription ended).
func (c *Conn) untrack(channel string) {
	c.revalMu.Lock()
	delete(c.rechecks, channel)
	c.revalMu.Unlock()
}

// Reauthorized applies the outcome of re-authorizing channel: an allow
// keeps the subscription (and schedules its next check when the decision
// lapses again), a denial or a failed check ends that subscription alone.
// expect is the recheck that asked, or nil (a WebSocket refresh); a
// recheck outdated meanwhile (the channel was unsubscribed, or subscribed
// anew) is dropped.
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
		delete(c.rechecks, channel)
		end = WithMessage(ReasonAuthorizationUnavailable, "cannot re-authorize the subscription now; subscribe again later")
	case d.Allowed && d.RecheckAfter > 0:
		if cur == nil {
			if c.rechecks == nil {
				c.rechecks = make(map[string]*Recheck)
			}
			cur = &Recheck{}
			c.rechecks[channel] = cur
		}
		cur.subToken, cur.due = subToken, time.Now().Add(d.RecheckAfter)
	case d.Allowed:
		delete(c.rechecks, channel)
	default:
		delete(c.rechecks, channel)
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
