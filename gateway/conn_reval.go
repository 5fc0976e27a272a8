package gateway

import (
	"log/slog"
	"strings"
	"time"

	"github.com/heraldgw/herald/subscriptions"
)

// recheck is a subscription whose authorization lapses: one allowed by a
// subscription token or by the webhook (Decision.RecheckAfter > 0).
type recheck struct {
	subToken string    // the subscription token it was allowed with, if any
	due      time.Time // when to re-authorize it
	running  bool      // a re-authorization is under way
}

// markAsked records that the client was asked to refresh the token
// expiring at exp; it reports false when it had been already.
func (c *Conn) markAsked(exp time.Time) bool {
	c.revalMu.Lock()
	defer c.revalMu.Unlock()
	if c.askedExp.Equal(exp) {
		return false
	}
	c.askedExp = exp
	return true
}

// track schedules the re-authorization of channel after d, or forgets it
// when d is not positive (a grant decision lasts as long as the token).
func (c *Conn) track(channel, subToken string, d time.Duration) {
	c.revalMu.Lock()
	defer c.revalMu.Unlock()
	if d <= 0 {
		delete(c.rechecks, channel)
		return
	}
	if c.rechecks == nil {
		c.rechecks = make(map[string]*recheck)
	}
	c.rechecks[channel] = &recheck{subToken: subToken, due: time.Now().Add(d)}
}

// untrack forgets channel's re-authorization (the subscription ended).
func (c *Conn) untrack(channel string) {
	c.revalMu.Lock()
	delete(c.rechecks, channel)
	c.revalMu.Unlock()
}

// reauthorized applies the outcome of re-authorizing channel: an allow
// keeps the subscription (and schedules its next check when the decision
// lapses again), a denial or a failed check ends that subscription alone.
// expect is the recheck that asked, or nil (a WebSocket refresh); a
// recheck outdated meanwhile (the channel was unsubscribed, or subscribed
// anew) is dropped.
func (c *Conn) reauthorized(channel, subToken string, expect *recheck, d subscriptions.Decision, err error) {
	c.revalMu.Lock()
	cur := c.rechecks[channel]
	if expect != nil && cur != expect {
		c.revalMu.Unlock()
		return
	}
	if cur != nil {
		cur.running = false
	}
	if c.closed() {
		c.revalMu.Unlock()
		return
	}
	var end Reason
	switch {
	case err != nil:
		delete(c.rechecks, channel)
		end = withMessage(ReasonAuthorizationUnavailable, "cannot re-authorize the subscription now; subscribe again later")
	case d.Allowed && d.RecheckAfter > 0:
		if cur == nil {
			if c.rechecks == nil {
				c.rechecks = make(map[string]*recheck)
			}
			cur = &recheck{}
			c.rechecks[channel] = cur
		}
		cur.subToken, cur.due = subToken, time.Now().Add(d.RecheckAfter)
	case d.Allowed:
		delete(c.rechecks, channel)
	default:
		delete(c.rechecks, channel)
		end = denialReason(d)
	}
	c.revalMu.Unlock()
	if err != nil {
		c.srv.metrics.revalFailures.WithLabelValues(checkReauthorize).Inc()
		c.srv.connLog.Log(slog.LevelWarn, "gateway: re-authorization failed; ending the subscription",
			slog.Uint64("conn", c.id), slog.String("channel", channel), slog.String("error", err.Error()))
	}
	if end.Code != "" {
		c.endSubscription(channel, end)
	}
}

// denialReason is the typed reason of a denied subscription:
// authorization_unavailable when the webhook could not be asked (retry
// later), otherwise forbidden; the message is the authorizer's, safe to
// show.
func denialReason(d subscriptions.Decision) Reason {
	if webhookUnavailable(d) {
		return withMessage(ReasonAuthorizationUnavailable, d.Reason)
	}
	if d.Reason == "" {
		return ReasonForbidden
	}
	return withMessage(ReasonForbidden, d.Reason)
}

// webhookUnavailable reports whether a denial came from a webhook that
// could not be asked: the authorizer's last resort, so its reason ends
// the decision's.
func webhookUnavailable(d subscriptions.Decision) bool {
	return !d.Allowed && strings.HasSuffix(d.Reason, subscriptions.ReasonWebhookUnavailable)
}
