package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/internal/promreg"
)

// Subscriber receives the publications of the channels it subscribed to
// on a Hub, typically one per connection and channel set.
//
// Deliver must not block: it enqueues p (without copying its bytes) into a
// bounded queue and, when the queue is full, drops p and marks itself slow
// so the connection is closed and the client resumes from history. Deliver
// is called on the broker's delivery path, in offset order per channel (the
// Deliver calls of one publication may run on several goroutines at once,
// each for other subscribers: HubConfig.FanoutWorkers); it
// must not call back into the Hub or the Broker synchronously (Publish from
// inside Deliver deadlocks the in-memory broker). A subscriber may receive
// a Deliver that was already under way when its Unsubscribe returned.
//
// A Subscriber is compared with == to find it again on Unsubscribe, so it
// must be of a comparable type; a pointer is usual.
type Subscriber interface {
	Deliver(p *Prepared)
}

// RunSubscriber is a Subscriber that takes a run of one channel's
// publications at once, in offset order (RunHandler), under Deliver's
// contract; a Subscriber that is not one gets the run's publications one
// Deliver at a time.
type RunSubscriber interface {
	Subscriber
	DeliverRun(run []*Prepared)
}

// ResyncSubscriber is a Subscriber that wants to know when publications of
// a channel may have been lost on their way to this node (see Resyncer).
// Resync is called on the broker's goroutine and must not block; the
// subscriber resumes the channel with Broker.Recover from the last position
// it delivered, and drops duplicates by offset.
type ResyncSubscriber interface {
	Subscriber
	Resync(key Key)
}

// Hub is this node's registry of local subscribers per channel. It is the
// broker's Handler: each publication is encoded once and handed to every
// local subscriber of its channel.
//
// Subscriber sets are copy-on-write: each channel holds an atomic pointer
// to an immutable slice, replaced under the channel's mutex by Subscribe
// and Unsubscribe. The delivery path takes no lock and allocates nothing
// per subscriber.
type Hub struct {
	broker  Broker
	log     *slog.Logger
	workers int // HubConfig.FanoutWorkers
	share   int // HubConfig.FanoutShare

	channels sync.Map // Key → *hubChannel

	nChannels atomic.Int64
	nSubs     atomic.Int64
	m         hubMetrics
}

// hubChannel is one channel's local subscribers.
type hubChannel struct {
	mu   sync.Mutex // writers only
	subs atomic.Pointer[[]Subscriber]
	dead bool // removed from the Hub; a writer holding it looks again
}

var (
	_ Handler         = (*Hub)(nil)
	_ PreparedHandler = (*Hub)(nil)
	_ Resyncer        = (*Hub)(nil)
	_ RunHandler      = (*Hub)(nil)
)

// NewHub returns a Hub over b. Wire it with b.Start(ctx, hub).
func NewHub(b Broker, cfg HubConfig) (*Hub, error) {
	if b == nil {
		return nil, fmt.Errorf("fanout: new hub: %w: broker is nil", ErrInvalidConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("fanout: new hub: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Hub{broker: b, log: log, workers: cfg.FanoutWorkers, share: cfg.FanoutShare}
	h.m = newHubMetrics(h)
	if cfg.Registerer != nil {
		if err := h.m.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("fanout: new hub: register metrics: %w", err)
		}
	}
	return h, nil
}

// Subscribe adds s to key's local subscribers. The first local subscriber
// of a key makes the Hub call Broker.Subscribe, and Subscribe returns only
// once the broker delivers the key's publications to this node; so a caller
// that then calls Recover misses nothing in between (it may see a
// publication twice: once recovered, once live; drop by offset).
// Subscribing the same s twice is a no-op.
func (h *Hub) Subscribe(ctx context.Context, key Key, s Subscriber) error {
	if s == nil || !reflect.TypeOf(s).Comparable() {
		return fmt.Errorf("fanout: hub subscribe: %w: nil or not comparable (use a pointer)", ErrInvalidSubscriber)
	}
	for {
		ch := h.channel(key)
		ch.mu.Lock()
		if ch.dead {
			ch.mu.Unlock()
			continue
		}
		err := h.addLocked(ctx, key, ch, s)
		ch.mu.Unlock()
		return err
	}
}

func (h *Hub) addLocked(ctx context.Context, key Key, ch *hubChannel, s Subscriber) error {
	var cur []Subscriber
	if p := ch.subs.Load(); p != nil {
		cur = *p
	}
	if slices.Contains(cur, s) {
		return nil
	}
	if len(cur) == 0 {
		if err := h.broker.Subscribe(ctx, key); err != nil {
			ch.dead = true
			h.channels.CompareAndDelete(key, ch)
			return fmt.Errorf("fanout: hub subscribe %s: %w", key, err)
		}
		h.nChannels.Add(1)
	}
	next := make([]Subscriber, len(cur), len(cur)+1)
	copy(next, cur)
	next = append(next, s)
	ch.subs.Store(&next)
	h.nSubs.Add(1)
	return nil
}

// Unsubscribe removes s from key's local subscribers; the last one makes
// the Hub call Broker.Unsubscribe. The local state is updated even when
// the broker call fails (its error is returned): publications that still
// arrive for the key find no subscriber. Unsubscribing a subscriber that
// is not subscribed is a no-op.
func (h *Hub) Unsubscribe(ctx context.Context, key Key, s Subscriber) error {
	v, ok := h.channels.Load(key)
	if !ok {
		return nil
	}
	ch := v.(*hubChannel)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.dead {
		return nil
	}
	p := ch.subs.Load()
	if p == nil {
		return nil
	}
	cur := *p
	i := slices.Index(cur, s)
	if i < 0 {
		return nil
	}
	h.nSubs.Add(-1)
	if len(cur) > 1 {
		next := make([]Subscriber, 0, len(cur)-1)
		next = append(next, cur[:i]...)
		next = append(next, cur[i+1:]...)
		ch.subs.Store(&next)
		return nil
	}
	// Last one: stop local delivery at once, then release the broker
	// subscription while still holding ch.mu, so a concurrent Subscribe of
	// the same key waits and re-subscribes after this unsubscribe.
	ch.subs.Store(nil)
	h.nChannels.Add(-1)
	err := h.broker.Unsubscribe(ctx, key)
	ch.dead = true
	h.channels.CompareAndDelete(key, ch)
	if err != nil {
		h.log.Warn("fanout: broker unsubscribe failed", "key", key.String(), "err", err)
		return fmt.Errorf("fanout: hub unsubscribe %s: %w", key, err)
	}
	return nil
}

// HandlePublication encodes p once and delivers it to every local
// subscriber of its channel. It implements Handler.
func (h *Hub) HandlePublication(p Publication) {
	h.m.publications.Inc()
	subs := h.subscribers(p.Key)
	if len(subs) == 0 {
		return
	}
	h.deliver(subs, NewPrepared(p))
}

// HandlePrepared delivers an already encoded publication. It implements
// PreparedHandler.
func (h *Hub) HandlePrepared(p *Prepared) {
	h.m.publications.Inc()
	subs := h.subscribers(p.pub.Key)
	if len(subs) == 0 {
		return
	}
	h.deliver(subs, p)
}

// HandlePublications encodes each publication of a run of one channel's
// once and hands the run to every local subscriber of the channel: at
// once to a RunSubscriber. It implements RunHandler.
func (h *Hub) HandlePublications(ps []Publication) {
	h.m.publications.Add(float64(len(ps)))
	if len(ps) == 0 {
		return
	}
	subs := h.subscribers(ps[0].Key)
	if len(subs) == 0 {
		return
	}
	r := &run{ps: make([]*Prepared, len(ps))}
	for i := range ps {
		r.ps[i] = NewPrepared(ps[i])
	}
	h.fan(subs, r)
	h.m.deliveries.Add(float64(len(subs) * len(ps)))
}

// deliver hands p to subs (fan).
func (h *Hub) deliver(subs []Subscriber, p *Prepared) {
	h.fan(subs, one{p})
	h.m.deliveries.Add(float64(len(subs)))
}

// delivery is what fan hands to each subscriber: one publication, or a
// run of one channel's.
type delivery interface{ to(subs []Subscriber) }

type one struct{ p *Prepared } // a pointer's size: no allocation as a delivery

func (d one) to(subs []Subscriber) {
	for _, s := range subs {
		s.Deliver(d.p)
	}
}

type run struct{ ps []*Prepared }

func (d *run) to(subs []Subscriber) {
	for _, s := range subs {
		if rs, ok := s.(RunSubscriber); ok {
			rs.DeliverRun(d.ps)
			continue
		}
		for _, p := range d.ps {
			s.Deliver(p)
		}
	}
}

// fan hands d to subs: in shares of at least h.share subscribers, on up
// to h.workers goroutines (the caller's one of them), and returns once
// every share is done, so the channel's next publication follows d at
// every subscriber.
func (h *Hub) fan(subs []Subscriber, d delivery) {
	parts := min(h.workers, len(subs)/h.share)
	if parts <= 1 {
		d.to(subs)
		return
	}
	size := (len(subs) + parts - 1) / parts
	var wg sync.WaitGroup
	for i := size; i < len(subs); i += size {
		share := subs[i:min(i+size, len(subs))]
		wg.Go(func() { d.to(share) })
	}
	d.to(subs[:size])
	wg.Wait()
}

// HandleResync tells every local subscriber of key that implements
// ResyncSubscriber that publications may have been lost. It implements
// Resyncer.
func (h *Hub) HandleResync(key Key) {
	subs := h.subscribers(key)
	for _, s := range subs {
		if r, ok := s.(ResyncSubscriber); ok {
			r.Resync(key)
		}
	}
	if len(subs) > 0 {
		h.m.resyncs.Inc()
	}
}

// Channels returns how many channels have at least one local subscriber.
func (h *Hub) Channels() int { return int(h.nChannels.Load()) }

// Subscriptions returns the number of (channel, subscriber) pairs.
func (h *Hub) Subscriptions() int { return int(h.nSubs.Load()) }

// subscribers returns key's current subscriber snapshot, never modified.
func (h *Hub) subscribers(key Key) []Subscriber {
	v, ok := h.channels.Load(key)
	if !ok {
		return nil
	}
	p := v.(*hubChannel).subs.Load()
	if p == nil {
		return nil
	}
	return *p
}

// channel returns key's hubChannel, creating an empty one when missing.
func (h *Hub) channel(key Key) *hubChannel {
	if v, ok := h.channels.Load(key); ok {
		return v.(*hubChannel)
	}
	v, _ := h.channels.LoadOrStore(key, &hubChannel{})
	return v.(*hubChannel)
}

// hubMetrics are the Hub's Prometheus metrics.
type hubMetrics struct {
	channels     prometheus.GaugeFunc
	subs         prometheus.GaugeFunc
	publications prometheus.Counter
	deliveries   prometheus.Counter
	resyncs      prometheus.Counter
}

func newHubMetrics(h *Hub) hubMetrics {
	return hubMetrics{
		channels: promreg.GaugeFunc("herald_hub_channels",
			"Channels with at least one subscriber on this node.",
			func() float64 { return float64(h.nChannels.Load()) }),
		subs: promreg.GaugeFunc("herald_hub_subscriptions",
			"Channel subscriptions of this node's connections.",
			func() float64 { return float64(h.nSubs.Load()) }),
		publications: promreg.Counter("herald_hub_publications_total",
			"Publications handed to the hub by the broker."),
		deliveries: promreg.Counter("herald_hub_deliveries_total",
			"Publications handed to local subscribers (one per subscriber)."),
		resyncs: promreg.Counter("herald_hub_resyncs_total",
			"Channels whose subscribers were told publications may have been lost in transit."),
	}
}

func (m hubMetrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.channels, m.subs, m.publications, m.deliveries, m.resyncs} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
