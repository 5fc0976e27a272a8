package modeltest

// The model-based test's broker (doc.go): a real MemoryBroker
// behind fault injection, and the Workers' stores.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/outboxfeed"
)

// ----------------------------------------------------------------------
// The broker: a real MemoryBroker (history of every channel kept whole)
// behind fault injection.

var (
	errModelOutage = errors.New("model: broker unreachable")
	errModelLost   = errors.New("model: connection lost before the broker answered")
	errModelDead   = errors.New("model: this Worker's process is gone")
)

// modelAccept is one publication the broker accepted, as the Worker made it.
type modelAccept struct {
	worker   string
	fence    fanout.Fence
	offset   uint64
	lostNote string
}

type modelBroker struct {
	mem  *fanout.MemoryBroker
	down atomic.Int32 // outages in progress (they may overlap)
	sig  bcast

	mu       sync.Mutex
	fates    map[string]*mRec
	calls    map[string]int // publishes that reached the record's fate
	replayed map[string]bool
	lost     map[string]int // publishes accepted whose answer was lost
	hist     map[fanout.Key][]string
	copies   map[string]int
	accepts  map[string][]modelAccept
	appended int
	// trapped: records a paused or dying Worker was publishing, past
	// their fate: they may reach the history at any time, a replay too.
	trapped map[string]bool
}

func newModelBroker(t *testing.T) *modelBroker {
	mem, err := fanout.NewMemoryBroker(fanout.MemoryConfig{HistorySize: 1 << 22, HistoryTTL: 24 * time.Hour})
	if err != nil {
		t.Fatalf("memory broker: %v", err)
	}
	b := &modelBroker{mem: mem, fates: map[string]*mRec{}, calls: map[string]int{}, replayed: map[string]bool{},
		lost: map[string]int{}, hist: map[fanout.Key][]string{}, copies: map[string]int{}, accepts: map[string][]modelAccept{},
		trapped: map[string]bool{}}
	if err := mem.Start(context.Background(), b); err != nil {
		t.Fatalf("memory broker start: %v", err)
	}
	return b
}

// HandlePublication records the channel history as the broker appends it
// (called inside Publish, under the channel's lock: offset order).
func (b *modelBroker) HandlePublication(p fanout.Publication) {
	b.mu.Lock()
	b.hist[p.Key] = append(b.hist[p.Key], p.ID)
	b.copies[p.ID]++
	b.appended++
	b.mu.Unlock()
	b.sig.notify()
}

func (b *modelBroker) register(r *mRec) {
	b.mu.Lock()
	b.fates[r.id] = r
	b.mu.Unlock()
}

func (b *modelBroker) publish(ctx context.Context, worker string, msg fanout.Message) (fanout.Publication, error) {
	pub, err := b.mem.Publish(ctx, msg)
	if err == nil {
		b.mu.Lock()
		b.accepts[msg.ID] = append(b.accepts[msg.ID], modelAccept{worker: worker, fence: msg.Fence, offset: pub.Offset})
		b.mu.Unlock()
	}
	return pub, err
}

// publishWithFaults is a healthy Worker's publish: the outage, then the
// record's fate.
func (b *modelBroker) publishWithFaults(ctx context.Context, worker string, msg fanout.Message) (fanout.Publication, error) {
	if b.down.Load() > 0 {
		return fanout.Publication{}, errModelOutage
	}
	b.mu.Lock()
	rec := b.fates[msg.ID]
	n := b.calls[msg.ID]
	b.calls[msg.ID]++
	replayed := b.replayed[msg.ID]
	b.mu.Unlock()
	if rec != nil && !replayed {
		switch {
		case rec.fate == fateRetry && n < rec.fails, rec.fate == fateExhaust:
			return fanout.Publication{}, outboxfeed.Retryable(errors.New("model: target busy"))
		case rec.fate == fatePermanent:
			return fanout.Publication{}, outboxfeed.Permanent(errors.New("model: target refused the message"))
		case rec.fate == fateLost && n == 0:
			if _, err := b.publish(ctx, worker, msg); err != nil {
				return fanout.Publication{}, err
			}
			b.mu.Lock()
			b.lost[msg.ID]++
			a := b.accepts[msg.ID]
			a[len(a)-1].lostNote = " (answer lost)"
			b.mu.Unlock()
			return fanout.Publication{}, errModelLost
		}
	}
	return b.publish(ctx, worker, msg)
}

// modelArm is a one-shot trap a Worker's next publish falls into.
type modelArm uint8

const (
	armNone  modelArm = iota
	armPause          // block, ignoring ctx, until released
	armBlock          // block until the Worker is being stopped, then fail with its ctx
	armDie            // the broker accepts it, then the process is gone
)

// modelHit is where an armed publish was caught.
type modelHit struct {
	id    string
	key   fanout.Key
	fence fanout.Fence
}

// modelPublisher is one Worker's Publisher.
type modelPublisher struct {
	b       *modelBroker
	name    string
	dead    *atomic.Bool
	mu      sync.Mutex
	arm     modelArm
	hit     chan modelHit // one per armed trap
	release chan bool     // armPause: resume; true = into the broker
	killing chan struct{} // armBlock: closed once the Worker is being stopped
	abort   chan struct{} // closed at teardown: every trap lets go
}

func (p *modelPublisher) Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error) {
	if p.dead.Load() {
		return fanout.Publication{}, errModelDead
	}
	p.mu.Lock()
	arm := p.arm
	p.arm = armNone
	p.mu.Unlock()
	hit := modelHit{id: msg.ID, key: msg.Key, fence: msg.Fence}
	if arm == armPause || arm == armDie {
		p.b.mu.Lock()
		p.b.trapped[msg.ID] = true
		p.b.mu.Unlock()
	}
	switch arm {
	case armPause:
		p.hit <- hit
		var goOn bool
		select {
		case goOn = <-p.release:
		case <-p.abort:
		}
		if !goOn {
			return fanout.Publication{}, errModelLost
		}
		// The process resumes with its request on the wire.
		return p.b.publish(context.WithoutCancel(ctx), p.name, msg)
	case armBlock:
		p.hit <- hit
		select {
		case <-p.killing:
		case <-p.abort:
		}
		<-ctx.Done()
		return fanout.Publication{}, ctx.Err()
	case armDie:
		_, err := p.b.publish(ctx, p.name, msg)
		p.dead.Store(true)
		p.hit <- hit
		if err != nil {
			return fanout.Publication{}, err
		}
		return fanout.Publication{}, errModelDead
	}
	return p.b.publishWithFaults(ctx, p.name, msg)
}

// setArm arms a trap.
func (p *modelPublisher) setArm(a modelArm) {
	p.mu.Lock()
	p.arm = a
	p.mu.Unlock()
}

// disarm takes the trap back; false when a publish already fell into it
// (its hit is on the way).
func (p *modelPublisher) disarm() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.arm == armNone {
		return false
	}
	p.arm = armNone
	return true
}

// modelStore is a Worker's store; once its process is dead every call
// fails.
type modelStore struct {
	outboxfeed.Store
	dead *atomic.Bool
}

// ArmsWakeups is the wrapped store's (outboxfeed.WakeArmer), so that the
// Worker still arms the PostgreSQL store's wake-up trigger while idle.
func (s *modelStore) ArmsWakeups() bool {
	a, ok := s.Store.(outboxfeed.WakeArmer)
	return ok && a.ArmsWakeups()
}

func (s *modelStore) Claim(ctx context.Context, req outboxfeed.ClaimRequest) (*outboxfeed.Batch, error) {
	if s.dead.Load() {
		return nil, errModelDead
	}
	return s.Store.Claim(ctx, req)
}

func (s *modelStore) Complete(ctx context.Context, b *outboxfeed.Batch, out []outboxfeed.Outcome, next *outboxfeed.ClaimRequest) (bool, *outboxfeed.Batch, error) {
	if s.dead.Load() {
		return false, nil, errModelDead
	}
	return s.Store.Complete(ctx, b, out, next)
}

func (s *modelStore) Renew(ctx context.Context, b *outboxfeed.Batch, lease time.Duration) error {
	if s.dead.Load() {
		return errModelDead
	}
	return s.Store.Renew(ctx, b, lease)
}

func (s *modelStore) Stats(ctx context.Context) (outboxfeed.Stats, error) {
	if s.dead.Load() {
		return outboxfeed.Stats{}, errModelDead
	}
	return s.Store.Stats(ctx)
}

func (s *modelStore) Ping(ctx context.Context) error {
	if s.dead.Load() {
		return errModelDead
	}
	return s.Store.Ping(ctx)
}

// bcast wakes every waiter on each notify.
type bcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *bcast) c() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *bcast) notify() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}
