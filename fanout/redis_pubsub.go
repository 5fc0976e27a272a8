package fanout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Start opens this node's pub/sub connection and hands every publication
// of the subscribed channels to h, from one goroutine, until ctx ends or
// Stop is called. When h implements PreparedHandler the envelope received
// from Redis is handed over as is; when it implements Resyncer it hears of
// every reconnect.
func (b *RedisBroker) Start(ctx context.Context, h Handler) error {
	if h == nil {
		return fmt.Errorf("fanout: redis broker start: handler is nil")
	}
	return b.svc.start(ctx, "redis broker start", func() {
		b.handler = h
		b.prepared, _ = h.(PreparedHandler)
		b.resyncer, _ = h.(Resyncer)
		b.mu.Lock()
		b.ps = b.client.Subscribe(context.WithoutCancel(ctx))
		b.mu.Unlock()
	}, b.receiveLoop)
}

// Subscribe adds key's pub/sub channel to this node's connection and
// returns once Redis confirmed it, so every publication made after
// Subscribe returns reaches the handler. While the connection is down it
// waits (for the reconnect) until ctx ends; a failed Subscribe leaves the
// key unsubscribed.
func (b *RedisBroker) Subscribe(ctx context.Context, key Key) error {
	if err := validateKey(key); err != nil {
		return fmt.Errorf("fanout: subscribe: %w", err)
	}
	switch started, stopped := b.svc.state(); {
	case stopped:
		return wrapf("subscribe", ErrStopped)
	case !started:
		return wrapf("subscribe", ErrNotStarted)
	}
	topic := b.topic(key)
	b.mu.Lock()
	st := b.topics[topic]
	if st == nil {
		st = &topicState{key: key, ready: make(chan struct{})}
		b.topics[topic] = st
		b.pending[topic]++
		// go-redis keeps the topic even when the write fails and sends it
		// again on reconnect, so a failure here only means waiting longer.
		if err := b.subscribeLocked(ctx, topic); err != nil {
			b.logs.warn("fanout: redis subscribe not sent; waiting for the connection", "err", err)
		}
	}
	b.mu.Unlock()

	select {
	case <-st.ready:
		return nil
	case <-b.done:
		return wrapf("subscribe", ErrStopped)
	case <-ctx.Done():
		b.mu.Lock()
		if b.topics[topic] == st && !st.confirmed {
			delete(b.topics, topic)
			_ = b.unsubscribeLocked(ctx, topic)
		}
		b.mu.Unlock()
		return fmt.Errorf("fanout: subscribe %s: waiting for Redis to confirm: %w", key, ctx.Err())
	}
}

// Unsubscribe removes key's pub/sub channel from this node's connection.
func (b *RedisBroker) Unsubscribe(ctx context.Context, key Key) error {
	topic := b.topic(key)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[topic]; !ok {
		return nil
	}
	delete(b.topics, topic)
	if err := b.unsubscribeLocked(ctx, topic); err != nil {
		return fmt.Errorf("fanout: unsubscribe %s: %w", key, err)
	}
	return nil
}

// subscribeLocked and unsubscribeLocked write to the pub/sub connection.
// The caller's cancellation is dropped: go-redis treats a canceled context
// as a broken connection and would reconnect (and resync) the whole node;
// the write is bounded by the client's write timeout instead. Caller holds
// b.mu.
func (b *RedisBroker) subscribeLocked(ctx context.Context, topics ...string) error {
	ctx = context.WithoutCancel(ctx)
	if b.cfg.Sharded {
		return b.ps.SSubscribe(ctx, topics...)
	}
	return b.ps.Subscribe(ctx, topics...)
}

func (b *RedisBroker) unsubscribeLocked(ctx context.Context, topic string) error {
	ctx = context.WithoutCancel(ctx)
	if b.cfg.Sharded {
		return b.ps.SUnsubscribe(ctx, topic)
	}
	return b.ps.Unsubscribe(ctx, topic)
}

// receiveLoop reads the pub/sub connection. It hands each publication to
// the handler at once, confirms subscriptions, pings a silent connection
// and replaces one that stays silent.
//
// Lost publications are detected by their subscriptions, not by errors: a
// new connection (whoever made it: this loop, go-redis inside a Subscribe
// or Ping, or replacePubSub) subscribes every topic again, and a
// confirmation for a topic that was already confirmed, with no SUBSCRIBE
// of ours outstanding, can only come from such a resubscription. From that
// confirmation on the topic is live again, so that is when its key is
// resynced.
func (b *RedisBroker) receiveLoop(ctx context.Context) {
	var (
		pinged   bool // a PING is outstanding on a silent connection
		failures int
	)
	for {
		b.mu.Lock()
		ps := b.ps
		b.mu.Unlock()
		msg, err := ps.ReceiveTimeout(ctx, b.cfg.HealthCheckInterval)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if isTimeout(err) {
				if !pinged {
					pinged = true
					_ = ps.Ping(context.WithoutCancel(ctx))
					continue
				}
				pinged = false
				b.m.reconnects.Inc()
				b.logs.warn("fanout: redis pub/sub connection did not answer a ping; replacing it")
				b.replacePubSub(ctx)
				continue
			}
			pinged = false
			if failures == 0 {
				b.m.reconnects.Inc()
				b.logs.warn("fanout: redis pub/sub connection lost; reconnecting", "err", err)
			}
			// go-redis has reconnected (or will on the next receive) and
			// subscribes every topic again: SUBSCRIBEs written on the old
			// connection will never be confirmed.
			b.mu.Lock()
			clear(b.pending)
			b.mu.Unlock()
			failures++
			if !sleepCtx(ctx, backoff(failures)) {
				return
			}
			continue
		}
		failures, pinged = 0, false
		switch m := msg.(type) {
		case *redis.Message:
			b.dispatch(m)
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				if key, resync := b.confirm(m.Channel); resync && b.resyncer != nil {
					b.resyncer.HandleResync(key)
				}
			}
		}
	}
}

// replacePubSub closes the current pub/sub connection and opens a new one
// subscribed to every topic.
func (b *RedisBroker) replacePubSub(ctx context.Context) {
	b.mu.Lock()
	old := b.ps
	b.ps = b.client.Subscribe(context.WithoutCancel(ctx))
	clear(b.pending)
	if topics := slices.Collect(maps.Keys(b.topics)); len(topics) > 0 {
		if err := b.subscribeLocked(ctx, topics...); err != nil {
			b.logs.warn("fanout: redis resubscribe not sent; waiting for the connection", "err", err)
		}
	}
	b.mu.Unlock()
	_ = old.Close()
}

// confirm handles Redis's confirmation of a SUBSCRIBE for topic: the
// topic is live once the last SUBSCRIBE written for it is confirmed. It
// reports resync for a topic confirmed earlier with nothing outstanding: a
// resubscription after a new connection (see receiveLoop).
func (b *RedisBroker) confirm(topic string) (key Key, resync bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.pending[topic]; n > 1 {
		b.pending[topic] = n - 1
		return Key{}, false
	}
	_, outstanding := b.pending[topic]
	delete(b.pending, topic)
	st := b.topics[topic]
	switch {
	case st == nil:
		return Key{}, false
	case !st.confirmed:
		st.confirmed = true
		close(st.ready)
		return Key{}, false
	default:
		return st.key, !outstanding
	}
}

// dispatch decodes one pub/sub message ("<tenant>\n<envelope>") and hands
// it to the handler. A message that does not decode, or whose tenant and
// channel do not match the pub/sub channel it came on, is counted, logged
// (rate-limited) and dropped.
func (b *RedisBroker) dispatch(m *redis.Message) {
	b.m.messages.Inc()
	tenant, env, ok := strings.Cut(m.Payload, "\n")
	if !ok {
		b.decodeError(m.Channel, errors.New("no tenant line"))
		return
	}
	raw := []byte(env)
	pub, err := DecodeEnvelope(raw)
	if err != nil {
		b.decodeError(m.Channel, err)
		return
	}
	pub.Key.Tenant = tenant
	if k, ok := b.keyOfTopic(m.Channel); !ok || k != pub.Key {
		b.decodeError(m.Channel, fmt.Errorf("tenant %q and channel %q do not match the pub/sub channel", tenant, pub.Key.Channel))
		return
	}
	if b.prepared != nil {
		b.prepared.HandlePrepared(&Prepared{pub: pub, json: raw})
		return
	}
	b.handler.HandlePublication(pub)
}

func (b *RedisBroker) decodeError(topic string, err error) {
	b.m.decodeErrors.Inc()
	b.logs.warn("fanout: redis pub/sub message dropped", "topic", topic, "err", err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// backoff is the wait before the n-th consecutive receive attempt: none for
// the first (go-redis has just reconnected), then 50ms doubling to 2s.
func backoff(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	return min(50*time.Millisecond<<min(n-2, 6), 2*time.Second)
}

// sleepCtx waits d or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
