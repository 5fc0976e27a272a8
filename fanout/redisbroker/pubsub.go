package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/internal/errwrap"
	"github.com/heraldgw/herald/internal/lifecycle"
	"github.com/heraldgw/herald/internal/wait"
	"github.com/redis/go-redis/v9"
)

// Start opens this node's pub/sub connection (in Cluster mode, the
// connections open as channels are subscribed) and hands every
// publication of the subscribed channels to h, from one goroutine per
// connection, until ctx ends or Stop is called. When h implements
// fanout.PreparedHandler the envelope received from Redis is handed over as is;
// when it implements fanout.Resyncer it hears of every reconnect.
func (b *Broker) Start(ctx context.Context, h fanout.Handler) error {
	if h == nil {
		return fmt.Errorf("fanout: redis broker start: handler is nil")
	}
	err := b.svc.Start(ctx, func(context.Context) error {
		b.handler = h
		b.prepared, _ = h.(fanout.PreparedHandler)
		b.resyncer, _ = h.(fanout.Resyncer)
		b.mu.Lock()
		defer b.mu.Unlock()
		// The shards' receive loops run under runCtx, not the service:
		// cluster shards open and close after Start. Stop cancels it and
		// waits for them.
		b.runCtx, b.cancelRun = context.WithCancel(ctx)
		if b.cluster == nil {
			sh, err := b.newShardLocked("")
			if err != nil {
				return err
			}
			if err := b.subscribeLocked(b.runCtx, sh, b.hbTopic); err != nil {
				b.logs.Warn("fanout: redis heartbeat subscribe not sent; waiting for the connection", "err", err)
			}
			b.lastBeat.Store(time.Now().UnixNano())
			b.loops.Go(func() { b.heartbeatLoop(b.runCtx, sh) })
		}
		return nil
	})
	if errors.Is(err, lifecycle.ErrStarted) || errors.Is(err, lifecycle.ErrStopped) {
		return errwrap.Wrap("redis broker start", err)
	}
	return err
}

// Subscribe adds key's pub/sub channel to this node's connection (in
// Cluster mode, the one to its slot's primary) and returns once Redis
// confirmed it, so every publication made after Subscribe returns reaches
// the handler. While the connection is down it waits (for the reconnect)
// until ctx ends; a failed Subscribe leaves the key unsubscribed.
func (b *Broker) Subscribe(ctx context.Context, key fanout.Key) error {
	if err := fanout.ValidateKey(key); err != nil {
		return fmt.Errorf("fanout: subscribe: %w", err)
	}
	switch started, stopped := b.svc.State(); {
	case stopped:
		return errwrap.Wrap("subscribe", fanout.ErrStopped)
	case !started:
		return errwrap.Wrap("subscribe", ErrNotStarted)
	}
	topic := b.topic(key)
	b.mu.Lock()
	st := b.topics[topic]
	b.mu.Unlock()
	if st == nil {
		var addr string
		if b.cluster != nil {
			// Outside the lock: the first call may load the slot map.
			c, err := b.cluster.MasterForKey(ctx, topic)
			if err != nil {
				return fmt.Errorf("fanout: subscribe %s: find the slot's primary: %w", key, err)
			}
			addr = c.Options().Addr
		}
		b.mu.Lock()
		if st = b.topics[topic]; st == nil {
			st = &topicState{key: key, ready: make(chan struct{})}
			if err := b.routeLocked(ctx, topic, st, addr); err != nil {
				b.mu.Unlock()
				return errwrap.Wrap("subscribe", err)
			}
			b.topics[topic] = st
		}
		b.mu.Unlock()
	}

	select {
	case <-st.ready:
		return nil
	case <-b.done:
		return errwrap.Wrap("subscribe", fanout.ErrStopped)
	case <-ctx.Done():
		b.mu.Lock()
		if b.topics[topic] == st && !st.confirmed {
			b.removeLocked(ctx, topic, st)
		}
		b.mu.Unlock()
		return fmt.Errorf("fanout: subscribe %s: waiting for Redis to confirm: %w", key, ctx.Err())
	}
}

// Unsubscribe removes key's pub/sub channel from this node's connection.
func (b *Broker) Unsubscribe(ctx context.Context, key fanout.Key) error {
	topic := b.topic(key)
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.topics[topic]
	if !ok {
		return nil
	}
	if err := b.removeLocked(ctx, topic, st); err != nil {
		return fmt.Errorf("fanout: unsubscribe %s: %w", key, err)
	}
	return nil
}

// removeLocked forgets topic and unsubscribes it from its shard, closing a
// cluster shard left with no topic. Caller holds b.mu.
func (b *Broker) removeLocked(ctx context.Context, topic string, st *topicState) error {
	delete(b.topics, topic)
	sh := st.shard
	if sh == nil {
		return nil // being moved between shards: reroute drops it
	}
	delete(sh.topics, topic)
	st.shard = nil
	if b.cluster != nil && len(sh.topics) == 0 {
		b.closeShardLocked(sh)
		return nil
	}
	return b.unsubscribeLocked(ctx, sh, topic)
}

// subscribeLocked and unsubscribeLocked write to sh's connection, in
// Cluster mode one command per slot. The caller's cancellation is dropped:
// go-redis treats a canceled context as a broken connection and would
// reconnect (and resync) the whole connection; the write is bounded by the
// client's write timeout instead. Caller holds b.mu.
func (b *Broker) subscribeLocked(ctx context.Context, sh *redisShard, topics ...string) error {
	return b.sendLocked(ctx, topics, sh.ps.Subscribe, sh.ps.SSubscribe)
}

func (b *Broker) unsubscribeLocked(ctx context.Context, sh *redisShard, topics ...string) error {
	return b.sendLocked(ctx, topics, sh.ps.Unsubscribe, sh.ps.SUnsubscribe)
}

// sendLocked sends a (un)subscription of topics: plain, or sharded with
// Sharded, one command a slot in a cluster (the first error is returned,
// the other slots' commands are sent all the same). Caller holds b.mu.
func (b *Broker) sendLocked(ctx context.Context, topics []string, plain, sharded func(context.Context, ...string) error) error {
	ctx = context.WithoutCancel(ctx)
	if !b.cfg.Sharded {
		return plain(ctx, topics...)
	}
	if b.cluster == nil {
		return sharded(ctx, topics...)
	}
	var first error
	for _, group := range bySlot(topics) {
		if err := sharded(ctx, group...); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// receiveLoop reads sh's connection. It hands each publication to the
// handler at once, confirms subscriptions, pings a silent connection and
// replaces one that stays silent.
//
// Lost publications are detected by their subscriptions, not by errors: a
// new connection (whoever made it: this loop, go-redis inside a Subscribe
// or Ping, or replaceShard) subscribes every topic again, and a
// confirmation for a topic that was already confirmed, with no SUBSCRIBE
// of ours outstanding (or one marked for resync when it moved between
// shards), can only come from such a resubscription. From that
// confirmation on the topic is live again, so that is when its key is
// resynced.
func (b *Broker) receiveLoop(ctx context.Context, sh *redisShard) {
	defer func() {
		if sh.client != nil {
			_ = sh.client.Close()
		}
	}()
	var (
		pinged   bool // a PING is outstanding on a silent connection
		failures int
	)
	for {
		b.mu.Lock()
		ps := sh.ps
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
				b.logs.Warn("fanout: redis pub/sub connection did not answer a ping; replacing it", "addr", sh.addr)
				b.replaceShard(ctx, sh)
				continue
			}
			if slot, addr, ok := movedTo(err); ok && b.cluster != nil && addr != sh.addr {
				b.moveSlot(ctx, sh, slot, addr)
				continue
			}
			pinged = false
			if failures == 0 {
				b.m.reconnects.Inc()
				b.logs.Warn("fanout: redis pub/sub connection lost; reconnecting", "addr", sh.addr, "err", err)
			}
			failures++
			if b.cluster != nil {
				b.cluster.ReloadState(ctx)
				if !wait.Sleep(ctx, backoff(failures)) {
					return
				}
				b.restoreShard(ctx, sh)
				continue
			}
			// go-redis has reconnected (or will on the next receive) and
			// subscribes every topic again: SUBSCRIBEs written on the old
			// connection will never be confirmed.
			b.mu.Lock()
			clear(sh.pending)
			b.mu.Unlock()
			// A replacement (by the heartbeat) is a fresh try: it ends
			// the wait.
			select {
			case <-ctx.Done():
				return
			case <-sh.kick:
			case <-time.After(backoff(failures)):
			}
			continue
		}
		failures, pinged = 0, false
		b.handle(ctx, sh, ps, msg)
	}
}

// handle acts on one message the receive loop read from ps: sh's
// connection, or the one it had before a replacement.
func (b *Broker) handle(ctx context.Context, sh *redisShard, ps *redis.PubSub, msg any) {
	switch m := msg.(type) {
	case *redis.Message:
		if m.Channel == b.hbTopic {
			// Only a heartbeat of the current connection says the
			// subscription works. One read from a connection replaced
			// meanwhile was published before the new connection's
			// SUBSCRIBE, which Redis may not have confirmed yet: a
			// publication made then would reach neither.
			if sh.live.Load() == ps {
				b.beat()
			}
			return
		}
		b.dispatch(m)
	case *redis.Subscription:
		switch m.Kind {
		case "subscribe", "ssubscribe":
			if key, resync := b.confirm(sh, m.Channel); resync && b.resyncer != nil {
				b.resyncer.HandleResync(key)
			}
		case "sunsubscribe":
			if b.cluster != nil {
				b.lost(ctx, sh, m.Channel)
			}
		}
	}
}

// renewLocked gives sh, unless it is closed, a new connection with no
// subscription awaiting confirmation, and returns the old one for the
// caller to close once b.mu is released (nil when sh is closed). Caller
// holds b.mu.
func (b *Broker) renewLocked(ctx context.Context, sh *redisShard) *redis.PubSub {
	if sh.closed {
		return nil
	}
	old := sh.ps
	sh.ps = b.newPubSub(ctx, sh)
	sh.live.Store(sh.ps)
	clear(sh.pending)
	return old
}

// replaceShard closes sh's connection and opens a new one subscribed to
// every topic.
func (b *Broker) replaceShard(ctx context.Context, sh *redisShard) {
	if b.cluster != nil {
		b.restoreShard(ctx, sh)
		return
	}
	b.mu.Lock()
	old := b.renewLocked(ctx, sh)
	if old == nil {
		b.mu.Unlock()
		return
	}
	if topics := append(slices.Collect(maps.Keys(sh.topics)), b.hbTopic); len(topics) > 0 {
		if err := b.subscribeLocked(ctx, sh, topics...); err != nil {
			b.logs.Warn("fanout: redis resubscribe not sent; waiting for the connection", "err", err)
		}
	}
	b.mu.Unlock()
	_ = old.Close()
	select {
	case sh.kick <- struct{}{}:
	default:
	}
}

// heartbeatLoop publishes a heartbeat on hbTopic every HeartbeatInterval
// through the command client (to whichever server takes publications now)
// and, when sh received none for 3 intervals, marks the subscription
// stalled and replaces sh's connection. The publish runs beside the loop,
// one at a time (a stuck connection holds it up to the client's read
// timeout), so the check keeps its pace. Outside Cluster mode only.
func (b *Broker) heartbeatLoop(ctx context.Context, sh *redisShard) {
	every := b.cfg.HeartbeatInterval
	t := time.NewTicker(every)
	defer t.Stop()
	var inflight atomic.Bool
	// A heartbeat's publish is bounded by the interval. go-redis bounds a
	// command by the client's read timeout, not by its context: one sent
	// on a connection that stopped carrying bytes (as the subscription's
	// may have) would hold the heartbeats that long, and the subscription
	// would be replaced, its channels resynced, every 3 intervals
	// meanwhile. Timed out, the connection leaves the pool.
	var pub interface {
		Do(ctx context.Context, args ...any) *redis.Cmd
	} = b.client
	if c, ok := b.client.(*redis.Client); ok {
		pub = c.WithTimeout(every)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !inflight.Swap(true) {
			b.loops.Go(func() {
				defer inflight.Store(false)
				pctx, cancel := context.WithTimeout(ctx, every)
				defer cancel()
				// A failed publish is not an error here: no heartbeat
				// arrives, which is what the check looks for.
				_ = pub.Do(pctx, b.pubCmd, b.hbTopic, "").Err()
			})
		}
		now := time.Now().UnixNano()
		if silent := time.Duration(now - b.lastBeat.Load()); silent > 3*every {
			if !b.stalled.Swap(true) {
				b.m.stalls.Inc()
				b.logs.Warn("fanout: redis pub/sub received no heartbeat; unready, resubscribing on a new connection", "silent", silent)
			}
			b.lastBeat.Store(now) // the new connection gets 3 intervals too
			b.replaceShard(ctx, sh)
		}
	}
}

// beat records a heartbeat received on this node's subscription.
func (b *Broker) beat() {
	b.lastBeat.Store(time.Now().UnixNano())
	if b.stalled.Swap(false) {
		b.log.Info("fanout: redis pub/sub receives heartbeats again; ready")
	}
}

// confirm handles Redis's confirmation of a SUBSCRIBE for topic on sh: the
// topic is live once the last SUBSCRIBE written for it is confirmed. It
// reports resync for a topic confirmed earlier with nothing outstanding (a
// resubscription after a new connection, see receiveLoop), or moved here
// from another shard.
func (b *Broker) confirm(sh *redisShard, topic string) (key fanout.Key, resync bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := sh.pending[topic]; n > 1 {
		sh.pending[topic] = n - 1
		return fanout.Key{}, false
	}
	_, outstanding := sh.pending[topic]
	delete(sh.pending, topic)
	st := sh.topics[topic]
	switch {
	case st == nil:
		return fanout.Key{}, false
	case !st.confirmed:
		st.confirmed = true
		st.resync = false
		close(st.ready)
		return fanout.Key{}, false
	case outstanding && !st.resync:
		return fanout.Key{}, false
	default:
		st.resync = false
		return st.key, true
	}
}

// dispatch decodes one pub/sub message ("<tenant>\n<envelope>") and hands
// it to the handler. A message that does not decode, or whose tenant and
// channel do not match the pub/sub channel it came on, is counted, logged
// (rate-limited) and dropped.
func (b *Broker) dispatch(m *redis.Message) {
	b.m.messages.Inc()
	tenant, env, ok := strings.Cut(m.Payload, "\n")
	if !ok {
		b.decodeError(m.Channel, errors.New("no tenant line"))
		return
	}
	p, err := fanout.PreparedFromEnvelope(tenant, []byte(env))
	if err != nil {
		b.decodeError(m.Channel, err)
		return
	}
	if k, ok := b.keyOfTopic(m.Channel); !ok || k != p.Key() {
		b.decodeError(m.Channel, fmt.Errorf("tenant %q and channel %q do not match the pub/sub channel", tenant, p.Key().Channel))
		return
	}
	if b.prepared != nil {
		b.prepared.HandlePrepared(p)
		return
	}
	b.handler.HandlePublication(p.Publication())
}

func (b *Broker) decodeError(topic string, err error) {
	b.m.decodeErrors.Inc()
	b.logs.Warn("fanout: redis pub/sub message dropped", "topic", topic, "err", err)
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
