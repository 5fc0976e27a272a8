package fanout

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/fanout/internal/errwrap"
	"github.com/heraldgw/herald/internal/lifecycle"
)

// MemoryBroker is the broker of a single node: every channel's stream
// lives in this process. Without MemoryConfig.HistoryDir it is lost on
// restart (a restarted node has new epochs, so resuming clients are told
// to refresh); with it, a node that was stopped cleanly starts again with
// every channel's epoch, offsets and retained history (see HistoryDir).
//
// Publish holds the channel's lock while it assigns the offset, appends to
// the history and calls the Handler, so per channel the delivery order is
// the offset order. Each channel indexes the message ids it retains, so a
// repeated id is found in constant time (see Broker.Publish). A fenced Publish (see Fence) checks and raises its
// scope's newest fence value under the same lock, so no stale publication
// can be appended after a newer holder's publication on that channel.
type MemoryBroker struct {
	cfg MemoryConfig
	now func() time.Time // replaced by tests

	mu       sync.RWMutex
	channels map[Key]*memStream

	// fences holds the newest accepted fence value per scope (string →
	// *atomic.Int64), never dropped: read and raised without a lock
	// shared by the channels, under the publishing channel's mu.
	fences sync.Map

	hlog *historyLog // nil without HistoryDir

	handler atomic.Pointer[Handler]
	svc     lifecycle.Service
}

var (
	_ Broker       = (*MemoryBroker)(nil)
	_ RunPublisher = (*MemoryBroker)(nil)
)

// NewMemoryBroker returns a broker for one node. With HistoryDir it first
// loads the history kept there; Stop then closes the log.
func NewMemoryBroker(cfg MemoryConfig) (*MemoryBroker, error) {
	return newMemoryBroker(cfg, time.Now)
}

// newMemoryBroker is NewMemoryBroker with a clock (for tests).
func newMemoryBroker(cfg MemoryConfig, now func() time.Time) (*MemoryBroker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &MemoryBroker{cfg: cfg, now: now, channels: make(map[Key]*memStream)}
	if cfg.HistoryDir != "" {
		if err := b.openHistory(); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Start hands every later publication to h, synchronously inside Publish,
// until Stop; until ctx ends or Stop it also sweeps expired channels in the
// background and, with HistoryDir, writes the history log.
func (b *MemoryBroker) Start(ctx context.Context, h Handler) error {
	if h == nil {
		return fmt.Errorf("fanout: memory broker start: handler is nil")
	}
	runs := []func(context.Context){b.sweepLoop}
	if b.hlog != nil {
		runs = append(runs, b.logLoop)
	}
	err := b.svc.Start(ctx, func(context.Context) error { b.handler.Store(&h); return nil }, runs...)
	if err != nil {
		return errwrap.Wrap("memory broker start", err)
	}
	return nil
}

// Stop stops the sweeper and detaches the handler; the history stays
// readable. With HistoryDir it writes and syncs the rest of the log and
// marks it closed cleanly; publications after Stop are not logged. Safe
// to call twice and before Start.
func (b *MemoryBroker) Stop() {
	first := b.svc.Stop(nil)
	b.handler.Store(nil)
	if first && b.hlog != nil {
		b.hlog.close()
	}
}

// Publish assigns msg the next offset of its channel, appends it to the
// history and hands it to the handler (when started). A msg whose ID is
// still in the channel's history is answered with that publication
// instead, appending and handing out nothing; a fenced msg may be refused
// (ErrStaleFence) first (see Fence).
func (b *MemoryBroker) Publish(ctx context.Context, msg Message) (Publication, error) {
	if err := ctx.Err(); err != nil {
		return Publication{}, fmt.Errorf("fanout: publish: %w", err)
	}
	now := b.now()
	pub, err := NewPublication(msg, now)
	if err != nil {
		return Publication{}, err
	}
	nowNs := now.UnixNano()
	s := b.lockStream(pub.Key, nowNs)
	defer s.mu.Unlock()
	if err := b.raiseFence(msg.Fence); err != nil {
		return Publication{}, err
	}
	if old, ok := b.appendLocked(s, &pub, nowNs); !ok {
		return old, nil
	}
	if h := b.handler.Load(); h != nil {
		(*h).HandlePublication(pub)
	}
	return pub, nil
}

// appendLocked gives pub the next offset of s and appends it to the
// history (and its log), and reports true; a pub whose ID s still holds
// is answered with the publication already there, and false. Caller
// holds s.mu.
func (b *MemoryBroker) appendLocked(s *memStream, pub *Publication, nowNs int64) (Publication, bool) {
	if old, ok := s.find(pub.ID); ok {
		return old, false
	}
	s.top++
	s.lastActive.Store(nowNs)
	pub.Position = Position{Offset: s.top, Epoch: s.epoch}
	s.append(pub, b.cfg.HistorySize)
	if b.hlog != nil {
		b.hlog.appendPub(pub, nowNs)
	}
	return Publication{}, true
}

// lockStream returns key's stream locked (its mu), started over first
// when it was idle past HistoryTTL.
func (b *MemoryBroker) lockStream(key Key, nowNs int64) *memStream {
	for {
		s := b.stream(key, nowNs)
		s.mu.Lock()
		if s.evicted {
			s.mu.Unlock()
			continue
		}
		b.expireIfIdle(key, s, nowNs, int64(b.cfg.HistoryTTL))
		return s
	}
}

// PublishRun publishes a run of one channel's messages (RunPublisher):
// under the channel's lock once, each as Publish would, and the new
// publications are handed to the handler together at the end, still
// under the lock, so per channel the delivery order stays the offset
// order.
func (b *MemoryBroker) PublishRun(ctx context.Context, msgs []Message, out []Publication) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("fanout: publish: %w", err)
	}
	now := b.now()
	key := msgs[0].Key
	// Checked and encoded before the lock, as Publish does; a message that
	// fails ends the run there.
	pubs := make([]Publication, 0, len(msgs))
	var runErr error
	for i := range msgs {
		if msgs[i].Key != key {
			runErr = fmt.Errorf("fanout: publish: %w: a run is of one channel: %s after %s", ErrInvalidMessage, msgs[i].Key, key)
			break
		}
		pub, err := NewPublication(msgs[i], now)
		if err != nil {
			runErr = err
			break
		}
		pubs = append(pubs, pub)
	}
	if len(pubs) == 0 {
		return 0, runErr
	}
	nowNs := now.UnixNano()
	s := b.lockStream(key, nowNs)
	n, fresh, err := b.appendRun(s, msgs, pubs, out, nowNs)
	if len(fresh) > 0 {
		b.handOut(fresh)
	}
	s.mu.Unlock()
	if err != nil {
		return n, err
	}
	return n, runErr
}

// appendRun appends pubs (of msgs, in order) to s as Publish does each,
// and returns how many it took before one failed (a stale fence) and the
// new ones, which are to be handed out. Caller holds s.mu.
func (b *MemoryBroker) appendRun(s *memStream, msgs []Message, pubs []Publication, out []Publication, nowNs int64) (int, []Publication, error) {
	fresh := pubs[:0] // overwrites pubs from the front: entry i is read before it
	for i := range pubs {
		if err := b.raiseFence(msgs[i].Fence); err != nil {
			return i, fresh, err
		}
		pub := pubs[i]
		if old, ok := b.appendLocked(s, &pub, nowNs); !ok {
			out[i] = old
			continue
		}
		out[i] = pub
		fresh = append(fresh, pub)
	}
	return len(pubs), fresh, nil
}

// handOut hands a run of new publications to the handler (when started):
// together to a RunHandler, else one by one. Caller holds the channel's
// memStream mu.
func (b *MemoryBroker) handOut(fresh []Publication) {
	h := b.handler.Load()
	if h == nil {
		return
	}
	if rh, ok := (*h).(RunHandler); ok {
		rh.HandlePublications(fresh)
		return
	}
	for _, p := range fresh {
		(*h).HandlePublication(p)
	}
}

// raiseFence refuses f when its scope saw a higher value, else makes f's
// value the scope's newest; an unfenced f passes. Caller holds the
// channel's memStream mu.
func (b *MemoryBroker) raiseFence(f Fence) error {
	if f.Scope == "" {
		return nil
	}
	v, ok := b.fences.Load(f.Scope)
	if !ok {
		first := new(atomic.Int64)
		first.Store(math.MinInt64) // a scope not seen yet takes any value
		v, _ = b.fences.LoadOrStore(f.Scope, first)
	}
	newest := v.(*atomic.Int64)
	for {
		n := newest.Load()
		if f.Value < n {
			return fmt.Errorf("fanout: publish: %w (scope %q: fence %d, newest %d)", ErrStaleFence, f.Scope, f.Value, n)
		}
		if f.Value == n || newest.CompareAndSwap(n, f.Value) {
			return nil
		}
	}
}

// Recover returns the publications of key after since, when the history
// still holds all of them and the epoch matches. A channel never seen
// before is created with a fresh epoch and top offset 0, so a client that
// subscribed to an empty channel can later resume from {0, epoch}.
func (b *MemoryBroker) Recover(ctx context.Context, key Key, since Position, limit int) (Recovery, error) {
	if err := ctx.Err(); err != nil {
		return Recovery{}, fmt.Errorf("fanout: recover: %w", err)
	}
	if err := ValidateKey(key); err != nil {
		return Recovery{}, fmt.Errorf("fanout: recover: %w", err)
	}
	s := b.lockStream(key, b.now().UnixNano())
	r := s.recover(since, limit)
	s.mu.Unlock()
	return r, nil
}

// Subscribe is a no-op: on one node every publication reaches the handler.
func (b *MemoryBroker) Subscribe(ctx context.Context, key Key) error {
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("fanout: subscribe: %w", err)
	}
	return nil
}

// Unsubscribe is a no-op, as Subscribe.
func (b *MemoryBroker) Unsubscribe(ctx context.Context, key Key) error { return nil }

// Ping always succeeds.
func (b *MemoryBroker) Ping(ctx context.Context) error { return nil }

// Channels returns how many channels have a stream (history or epoch).
func (b *MemoryBroker) Channels() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.channels)
}

// stream returns key's stream, creating it (and evicting beyond
// MaxChannels) when missing.
func (b *MemoryBroker) stream(key Key, nowNs int64) *memStream {
	b.mu.RLock()
	s := b.channels[key]
	b.mu.RUnlock()
	if s != nil {
		return s
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s = b.channels[key]; s != nil {
		return s
	}
	if len(b.channels) >= b.cfg.MaxChannels {
		b.evictLocked(nowNs)
	}
	s = newMemStream(key, nowNs)
	if b.hlog != nil {
		b.hlog.appendReset(key, s.epoch, 0, nowNs)
	}
	b.channels[key] = s
	return s
}

// expireIfIdle starts key's stream s over when it is idle past ttl, and
// logs it. Caller holds s.mu.
func (b *MemoryBroker) expireIfIdle(key Key, s *memStream, nowNs, ttl int64) {
	if s.expireIfIdle(nowNs, ttl) && b.hlog != nil {
		b.hlog.appendReset(key, s.epoch, 0, nowNs)
	}
}

// evictLocked drops expired channels and then, while the map is still at
// MaxChannels, the idlest ~1% of it, so the scan's cost is shared by many
// creations. Caller holds b.mu for writing.
func (b *MemoryBroker) evictLocked(nowNs int64) {
	b.sweepLocked(nowNs)
	if len(b.channels) < b.cfg.MaxChannels {
		return
	}
	type idle struct {
		key  Key
		last int64
	}
	all := make([]idle, 0, len(b.channels))
	for k, s := range b.channels {
		all = append(all, idle{k, s.lastActive.Load()})
	}
	slices.SortFunc(all, func(a, c idle) int { return cmp.Compare(a.last, c.last) })
	n := max(1, b.cfg.MaxChannels/100, len(b.channels)-b.cfg.MaxChannels+1)
	for _, v := range all[:min(n, len(all))] {
		b.dropLocked(v.key)
	}
}

// sweepLocked drops the channels idle longer than HistoryTTL. Caller holds
// b.mu for writing.
func (b *MemoryBroker) sweepLocked(nowNs int64) {
	ttl := int64(b.cfg.HistoryTTL)
	for k, s := range b.channels {
		if nowNs-s.lastActive.Load() > ttl {
			b.dropLocked(k)
		}
	}
}

// dropLocked removes key's stream, marking it so a goroutine holding it
// looks the key up again. Caller holds b.mu for writing.
func (b *MemoryBroker) dropLocked(key Key) {
	s := b.channels[key]
	s.mu.Lock()
	s.evicted = true
	s.mu.Unlock()
	delete(b.channels, key)
}

// sweepLoop frees expired channels every min(HistoryTTL, 1 minute); an
// expired channel is also started over when it is next used, so the sweep
// only returns memory.
func (b *MemoryBroker) sweepLoop(ctx context.Context) {
	t := time.NewTicker(min(b.cfg.HistoryTTL, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.mu.Lock()
			b.sweepLocked(b.now().UnixNano())
			b.mu.Unlock()
		}
	}
}
