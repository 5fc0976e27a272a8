package redisbroker

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/heraldgw/herald/fanout"
	"github.com/redis/go-redis/v9"
)

// redisShard is one pub/sub connection and the topics subscribed on it.
//
// Outside Cluster mode there is one, opened by Start on the broker's
// client, and go-redis resubscribes its topics after a reconnect. In
// Cluster mode there is one per primary (by address) that owns the slot
// of a subscribed topic, on a client of its own to that address, opened
// on demand and closed when its last topic leaves. There the broker, not
// go-redis, restores a lost connection: go-redis would resubscribe every
// topic in one SSUBSCRIBE, which a cluster refuses (CROSSSLOT) unless all
// share a slot, and it would not notice that a slot moved.
//
// Its fields are guarded by the broker's mu.
type redisShard struct {
	addr    string        // the primary's address; "" outside Cluster mode
	client  *redis.Client // own client in Cluster mode, else nil
	ps      *redis.PubSub
	live    atomic.Pointer[redis.PubSub] // ps, for the receive loop to read without mu
	topics  map[string]*topicState
	pending map[string]int // SUBSCRIBE commands written, not yet confirmed
	kick    chan struct{}  // replaceShard's poke: the receive loop's backoff ends
	cancel  context.CancelFunc
	closed  bool
}

// newShardLocked opens the shard for addr and starts its receive loop.
// Caller holds b.mu.
func (b *Broker) newShardLocked(addr string) (*redisShard, error) {
	if b.runCtx == nil || b.runCtx.Err() != nil {
		return nil, fanout.ErrStopped
	}
	ctx, cancel := context.WithCancel(b.runCtx)
	sh := &redisShard{
		addr:    addr,
		topics:  make(map[string]*topicState),
		pending: make(map[string]int),
		kick:    make(chan struct{}, 1),
		cancel:  cancel,
	}
	if b.cluster != nil {
		sh.client = redis.NewClient(nodeOptions(b.cluster.Options(), addr))
	}
	sh.ps = b.newPubSub(ctx, sh)
	sh.live.Store(sh.ps)
	b.shards[addr] = sh
	b.loops.Go(func() { b.receiveLoop(ctx, sh) })
	return sh, nil
}

// newPubSub returns an idle pub/sub on sh's server: it connects on its
// first SUBSCRIBE.
func (b *Broker) newPubSub(ctx context.Context, sh *redisShard) *redis.PubSub {
	if sh.client != nil {
		return sh.client.SSubscribe(context.WithoutCancel(ctx))
	}
	return b.client.Subscribe(context.WithoutCancel(ctx))
}

// closeShardLocked ends sh's receive loop, which then closes its client.
// Caller holds b.mu.
func (b *Broker) closeShardLocked(sh *redisShard) {
	if sh.closed {
		return
	}
	sh.closed = true
	if b.shards[sh.addr] == sh {
		delete(b.shards, sh.addr)
	}
	sh.cancel()
	_ = sh.ps.Close()
}

// routeLocked subscribes topic on the shard of addr, opening it if needed.
// Caller holds b.mu.
func (b *Broker) routeLocked(ctx context.Context, topic string, st *topicState, addr string) error {
	sh := b.shards[addr]
	if sh == nil {
		var err error
		if sh, err = b.newShardLocked(addr); err != nil {
			return err
		}
	}
	st.shard = sh
	sh.topics[topic] = st
	sh.pending[topic]++
	// go-redis keeps the topic even when the write fails; the receive
	// loop sees the broken connection and restores it.
	if err := b.subscribeLocked(ctx, sh, topic); err != nil {
		b.logs.Warn("fanout: redis subscribe not sent; waiting for the connection", "addr", addr, "err", err)
	}
	return nil
}

// detachLocked takes topics off sh, unsubscribing them there, and returns
// them with no shard; a confirmed one is marked for resync. Caller holds
// b.mu.
func (b *Broker) detachLocked(ctx context.Context, sh *redisShard, topics []string) map[string]*topicState {
	out := make(map[string]*topicState, len(topics))
	for _, t := range topics {
		st := sh.topics[t]
		if st == nil {
			continue
		}
		delete(sh.topics, t)
		delete(sh.pending, t)
		st.shard = nil
		st.resync = st.confirmed
		out[t] = st
	}
	// SUNSUBSCRIBE mostly serves to drop them from go-redis's list; the
	// server, when it no longer owns the slot, answers MOVED, which the
	// receive loop ignores as nothing of that slot is left on sh.
	_ = b.unsubscribeLocked(ctx, sh, topics...)
	return out
}

// reroute subscribes detached topics on their owners: hint when set (a
// MOVED reply named it), else the primary of their slot as the cluster
// client knows it. A stale answer costs a MOVED reply and one more reroute.
func (b *Broker) reroute(ctx context.Context, from *redisShard, moved map[string]*topicState, hint string) {
	targets := make(map[string]string, len(moved))
	for t := range moved {
		addr := hint
		if hint == "" {
			addr = from.addr
			if c, err := b.cluster.MasterForKey(ctx, t); err == nil {
				addr = c.Options().Addr
			} else {
				b.logs.Warn("fanout: redis cluster slot owner unknown; retrying on the last one", "addr", from.addr, "err", err)
			}
		}
		targets[t] = addr
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for t, st := range moved {
		if b.topics[t] != st || st.shard != nil {
			continue // unsubscribed meanwhile
		}
		if err := b.routeLocked(ctx, t, st, targets[t]); err != nil {
			return // stopped
		}
	}
	if len(from.topics) == 0 {
		b.closeShardLocked(from)
	}
}

// lost handles a SUNSUBSCRIBE that Redis sent on its own: topic's slot
// left this primary (resharding or failover).
func (b *Broker) lost(ctx context.Context, sh *redisShard, topic string) {
	b.mu.Lock()
	if sh.topics[topic] == nil || sh.pending[topic] > 0 {
		// Ours (an Unsubscribe), or a SUBSCRIBE is on its way whose reply
		// settles it (MOVED or a confirmation).
		b.mu.Unlock()
		return
	}
	moved := b.detachLocked(ctx, sh, []string{topic})
	b.mu.Unlock()
	b.logs.Warn("fanout: redis cluster slot moved; resubscribing", "addr", sh.addr, "topic", topic)
	b.cluster.ReloadState(ctx)
	b.reroute(ctx, sh, moved, "")
}

// moveSlot handles a MOVED reply on sh: every topic of slot goes to addr.
func (b *Broker) moveSlot(ctx context.Context, sh *redisShard, slot int, addr string) {
	b.mu.Lock()
	var topics []string
	for t := range sh.topics {
		if keySlot(t) == slot {
			topics = append(topics, t)
		}
	}
	if len(topics) == 0 {
		b.mu.Unlock()
		return
	}
	moved := b.detachLocked(ctx, sh, topics)
	b.mu.Unlock()
	b.cluster.ReloadState(ctx)
	b.reroute(ctx, sh, moved, addr)
}

// restoreShard gives a cluster shard whose connection failed a new one and
// routes its topics again, each to its slot's current owner (a failover
// may have moved them).
func (b *Broker) restoreShard(ctx context.Context, sh *redisShard) {
	b.mu.Lock()
	old := b.renewLocked(ctx, sh)
	if old == nil {
		b.mu.Unlock()
		return
	}
	topics := make([]string, 0, len(sh.topics))
	for t := range sh.topics {
		topics = append(topics, t)
	}
	moved := make(map[string]*topicState, len(topics))
	for _, t := range topics {
		st := sh.topics[t]
		delete(sh.topics, t)
		st.shard = nil
		st.resync = st.confirmed
		moved[t] = st
	}
	b.mu.Unlock()
	_ = old.Close()
	b.reroute(ctx, sh, moved, "")
}

// nodeOptions are the options of a client to the cluster node at addr:
// the cluster's connection settings, and a pool for pub/sub alone.
func nodeOptions(c *redis.ClusterOptions, addr string) *redis.Options {
	return &redis.Options{
		Addr:                       addr,
		ClientName:                 c.ClientName,
		Dialer:                     c.Dialer,
		OnConnect:                  c.OnConnect,
		Protocol:                   c.Protocol,
		Username:                   c.Username,
		Password:                   c.Password,
		CredentialsProvider:        c.CredentialsProvider,
		CredentialsProviderContext: c.CredentialsProviderContext,
		MaxRetries:                 c.MaxRetries,
		MinRetryBackoff:            c.MinRetryBackoff,
		MaxRetryBackoff:            c.MaxRetryBackoff,
		DialTimeout:                c.DialTimeout,
		ReadTimeout:                c.ReadTimeout,
		WriteTimeout:               c.WriteTimeout,
		TLSConfig:                  c.TLSConfig,
		PoolSize:                   1, // commands go through the cluster client
		DisableIdentity:            c.DisableIdentity,
		IdentitySuffix:             c.IdentitySuffix,
	}
}

// movedTo parses a "MOVED <slot> <addr>" reply.
func movedTo(err error) (slot int, addr string, ok bool) {
	var re redis.Error
	if !errors.As(err, &re) {
		return 0, "", false
	}
	f := strings.Fields(re.Error())
	if len(f) != 3 || f[0] != "MOVED" {
		return 0, "", false
	}
	slot, perr := strconv.Atoi(f[1])
	return slot, f[2], perr == nil
}

// bySlot groups topics by their cluster slot: a cluster accepts one
// SSUBSCRIBE (or SUNSUBSCRIBE) only for channels of one slot.
func bySlot(topics []string) map[int][]string {
	out := make(map[int][]string)
	for _, t := range topics {
		s := keySlot(t)
		out[s] = append(out[s], t)
	}
	return out
}

// keySlot is the Redis Cluster slot of a key: CRC16 (XMODEM) of its hash
// tag (the part between the first '{' and the next '}', when not empty),
// else of the whole key, modulo 16384.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
