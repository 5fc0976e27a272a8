package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
)

// connCtl is one control event for the core writer.
type connCtl struct {
	channel string    // the subscription to end; "" asks for a fresh token
	reason  Reason    // why the subscription ends
	exp     time.Time // the expiry a fresh token is asked for
}

// pushCtl queues a control event for the writer and wakes it; it never
// blocks. The
// queue holds at most one reauth per token and one end per channel.
func (c *Conn) pushCtl(it connCtl) {
	if c.closed() {
		return
	}
	c.ctlMu.Lock()
	c.ctl = append(c.ctl, it)
	c.ctlMu.Unlock()
	select {
	case c.ctlCh <- struct{}{}:
	default:
	}
	if c.wake != nil {
		c.wake()
	}
}

// control writes the queued control events (writer only). Ending a
// subscription leaves the hub first, so no publication of the channel
// follows its "unsubscribed" event; when no channel is left, the stream
// ends with the last subscription's reason.
func (c *Conn) control(ctx context.Context, s sink) error {
	c.ctlMu.Lock()
	items := c.ctl
	c.ctl = nil
	c.ctlMu.Unlock()
	if err := s.setDeadline(time.Now().Add(c.srv.cfg.WriteTimeout)); err != nil {
		return err
	}
	wrote := false
	for _, it := range items {
		if it.channel == "" {
			if err := s.refreshRequest(it.exp); err != nil {
				return err
			}
			wrote = true
			continue
		}
		if !c.dropChannel(ctx, it.channel) {
			continue
		}
		c.srv.metrics.subsEnded.WithLabelValues(c.transport, it.reason.Code).Inc()
		if len(c.keys) == 0 {
			c.Close(it.reason, 0)
			return nil
		}
		if err := s.unsubscribed(it.channel, it.reason, c.pos); err != nil {
			return err
		}
		wrote = true
	}
	if wrote {
		return s.flush()
	}
	return nil
}

// dropChannel leaves the hub for one channel of the stream and stops
// tracking it (writer only). It reports false when the channel was not
// subscribed.
func (c *Conn) dropChannel(ctx context.Context, channel string) bool {
	key := fanout.Key{Tenant: c.claims.Tenant, Channel: channel}
	i := -1
	for j, k := range c.keys {
		if k == key {
			i = j
			break
		}
	}
	if i < 0 {
		return false
	}
	c.keys = append(c.keys[:i], c.keys[i+1:]...)
	c.pos.remove(channel)
	c.written.Delete(channel)
	c.untrack(channel)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hubCallTimeout)
	defer cancel()
	if err := c.srv.deps.Hub.Unsubscribe(ctx, key, c); err != nil {
		c.srv.connLog.Log(slog.LevelWarn, "gateway: unsubscribe failed",
			slog.Uint64("conn", c.id), slog.String("channel", channel), slog.String("error", err.Error()))
	}
	return true
}

// sseHooks connects an SSE stream to the revalidation timer: its claims
// never change, and its control events go through the core writer.
type sseHooks struct{ c *Conn }

func (h sseHooks) currentClaims() *auth.Claims { return h.c.claims }

func (h sseHooks) askRefresh(exp time.Time) { h.c.pushCtl(connCtl{exp: exp}) }

func (h sseHooks) endSubscription(channel string, r Reason) {
	h.c.pushCtl(connCtl{channel: channel, reason: r})
}
