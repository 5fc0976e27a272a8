package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// countingBroker wraps a fanout.MemoryBroker and records Subscribe/Unsubscribe.
type countingBroker struct {
	*fanout.MemoryBroker
	mu         sync.Mutex
	subscribed map[fanout.Key]bool
	subs       int
	unsubs     int
	failNext   error
}

func (c *countingBroker) Subscribe(ctx context.Context, key fanout.Key) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.failNext; err != nil {
		c.failNext = nil
		return err
	}
	if c.subscribed[key] {
		return fmt.Errorf("%v subscribed twice", key)
	}
	c.subscribed[key] = true
	c.subs++
	return nil
}

func (c *countingBroker) Unsubscribe(ctx context.Context, key fanout.Key) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.subscribed[key] {
		return fmt.Errorf("%v unsubscribed while not subscribed", key)
	}
	delete(c.subscribed, key)
	c.unsubs++
	return nil
}

type hubFixture struct {
	broker *countingBroker
	hub    *fanout.Hub
	reg    *prometheus.Registry
}

func newHubFixture(t *testing.T) hubFixture {
	t.Helper()
	mb := fanouttest.MemoryBroker(t, fanout.MemoryConfig{})
	cb := &countingBroker{MemoryBroker: mb, subscribed: make(map[fanout.Key]bool)}
	reg := prometheus.NewRegistry()
	hub := fanouttest.StartHub(t, cb, fanout.HubConfig{Registerer: reg})
	return hubFixture{broker: cb, hub: hub, reg: reg}
}

func (f hubFixture) subscribe(t testing.TB, key fanout.Key, s fanout.Subscriber) {
	t.Helper()
	if err := f.hub.Subscribe(fanouttest.Context(t), key, s); err != nil {
		t.Fatal(err)
	}
}

func TestHubFanOutEncodesOnce(t *testing.T) {
	t.Parallel()
	f := newHubFixture(t)
	key := acme("room")
	subs := make([]*fanouttest.Sub, 1000)
	for i := range subs {
		subs[i] = fanouttest.NewSub(16)
		f.subscribe(t, key, subs[i])
	}
	other := fanouttest.NewSub(16)
	f.subscribe(t, fanout.Key{Tenant: "other", Channel: "room"}, other)
	for i := range 10 {
		fanouttest.MustPublish(t, f.broker, fanouttest.Msg(key, fmt.Sprintf("m%d", i)))
	}
	first := subs[0].Drain()
	if len(first) != 10 {
		t.Fatalf("subscriber got %d publications, want 10", len(first))
	}
	for _, s := range subs[1:] {
		got := s.Drain()
		if len(got) != 10 {
			t.Fatalf("subscriber got %d publications, want 10", len(got))
		}
		for i := range got {
			if got[i] != first[i] {
				t.Fatal("subscribers got different *fanout.Prepared for one publication: encoded more than once")
			}
		}
	}
	for i, p := range first {
		if p.Position().Offset != uint64(i+1) {
			t.Fatalf("delivery %d has offset %d", i, p.Position().Offset)
		}
		d, err := fanout.DecodeEnvelope(p.JSON())
		if err != nil || d.ID != fmt.Sprintf("m%d", i) {
			t.Fatalf("envelope %d: %v %+v", i, err, d)
		}
	}
	if n := len(other.Drain()); n != 0 {
		t.Fatalf("another tenant's subscriber got %d publications", n)
	}
	if f.hub.Channels() != 2 || f.hub.Subscriptions() != 1001 {
		t.Fatalf("counts: channels %d subscriptions %d", f.hub.Channels(), f.hub.Subscriptions())
	}
	publications, deliveries, _ := f.hub.Counters()
	if v := testutil.ToFloat64(deliveries); v != 10000 {
		t.Fatalf("herald_hub_deliveries_total = %v, want 10000", v)
	}
	if v := testutil.ToFloat64(publications); v != 10 {
		t.Fatalf("herald_hub_publications_total = %v, want 10", v)
	}
	if n, err := testutil.GatherAndCount(f.reg, "herald_hub_channels", "herald_hub_subscriptions",
		"herald_hub_publications_total", "herald_hub_deliveries_total", "herald_hub_resyncs_total"); err != nil || n != 5 {
		t.Fatalf("registered metrics: %d, %v", n, err)
	}
}

// TestHubSlowSubscriberDoesNotHoldOthers: a subscriber whose queue is full
// drops; everyone else gets every publication, and Publish never waits.
func TestHubSlowSubscriberDoesNotHoldOthers(t *testing.T) {
	t.Parallel()
	f := newHubFixture(t)
	key := acme("feed")
	slow := fanouttest.NewSub(1) // never drained
	f.subscribe(t, key, slow)
	fast := make([]*fanouttest.Sub, 50)
	for i := range fast {
		fast[i] = fanouttest.NewSub(500)
		f.subscribe(t, key, fast[i])
	}
	const n = 500
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			fanouttest.MustPublish(t, f.broker, fanouttest.Msg(key, fmt.Sprintf("m%d", i)))
		}
	}()
	select {
	case <-done:
	case <-fanouttest.Context(t).Done():
		t.Fatal("publishing blocked behind a slow subscriber")
	}
	for _, s := range fast {
		if got := len(s.Drain()); got != n || s.Dropped.Load() != 0 {
			t.Fatalf("fast subscriber got %d (dropped %d), want %d", got, s.Dropped.Load(), n)
		}
	}
	if got := len(slow.Drain()); got != 1 || slow.Dropped.Load() != n-1 {
		t.Fatalf("slow subscriber kept %d and dropped %d", got, slow.Dropped.Load())
	}
}

// TestHubUnsubscribeDuringPublish churns subscribers while another
// goroutine publishes; a steady subscriber must still see every offset in
// order, and the broker subscription must track the Hub's.
func TestHubUnsubscribeDuringPublish(t *testing.T) {
	t.Parallel()
	f := newHubFixture(t)
	key := acme("churn")
	steady := fanouttest.NewSub(4000)
	f.subscribe(t, key, steady)

	const n = 2000
	ctx := fanouttest.Context(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			// Each churner also cycles a key of its own through first/last.
			own := acme(fmt.Sprintf("own-%d", w))
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := fanouttest.NewSub(8)
				for _, k := range []fanout.Key{key, own} {
					if err := f.hub.Subscribe(ctx, k, s); err != nil {
						t.Error(err)
						return
					}
				}
				for _, k := range []fanout.Key{key, own} {
					if err := f.hub.Unsubscribe(ctx, k, s); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	for i := range n {
		fanouttest.MustPublish(t, f.broker, fanouttest.Msg(key, fmt.Sprintf("m%d", i)))
	}
	close(stop)
	wg.Wait()

	got := steady.Drain()
	if len(got) != n {
		t.Fatalf("steady subscriber got %d, want %d", len(got), n)
	}
	for i, p := range got {
		if p.Position().Offset != uint64(i+1) {
			t.Fatalf("delivery %d has offset %d", i, p.Position().Offset)
		}
	}
	if f.hub.Channels() != 1 || f.hub.Subscriptions() != 1 {
		t.Fatalf("counts after churn: channels %d subscriptions %d", f.hub.Channels(), f.hub.Subscriptions())
	}
	f.broker.mu.Lock()
	defer f.broker.mu.Unlock()
	if len(f.broker.subscribed) != 1 || !f.broker.subscribed[key] {
		t.Fatalf("broker subscriptions after churn: %v", f.broker.subscribed)
	}
}

// TestHubPerChannelOrder publishes on several channels at once; every
// subscriber sees its channel's offsets in order.
func TestHubPerChannelOrder(t *testing.T) {
	t.Parallel()
	f := newHubFixture(t)
	const channels, n = 4, 300
	subs := make([]*fanouttest.Sub, channels)
	for c := range channels {
		subs[c] = fanouttest.NewSub(n)
		f.subscribe(t, acme(fmt.Sprintf("c%d", c)), subs[c])
	}
	var wg sync.WaitGroup
	for c := range channels {
		for w := range 2 {
			wg.Go(func() {
				for i := range n / 2 {
					fanouttest.MustPublish(t, f.broker, fanouttest.Msg(acme(fmt.Sprintf("c%d", c)), fmt.Sprint(w, "-", i)))
				}
			})
		}
	}
	wg.Wait()
	for c, s := range subs {
		got := s.Drain()
		if len(got) != n {
			t.Fatalf("channel %d: got %d", c, len(got))
		}
		for i, p := range got {
			if p.Position().Offset != uint64(i+1) || p.Key().Channel != fmt.Sprintf("c%d", c) {
				t.Fatalf("channel %d delivery %d: %v %v", c, i, p.Key(), p.Position())
			}
		}
	}
}

func TestHubBrokerSubscriptionFollowsFirstAndLast(t *testing.T) {
	t.Parallel()
	f := newHubFixture(t)
	key := acme("x")
	a, b := fanouttest.NewSub(1), fanouttest.NewSub(1)
	f.subscribe(t, key, a)
	f.subscribe(t, key, a) // no-op
	f.subscribe(t, key, b)
	if f.broker.subs != 1 || f.hub.Subscriptions() != 2 {
		t.Fatalf("after two subscribers: broker subs %d, hub subscriptions %d", f.broker.subs, f.hub.Subscriptions())
	}
	ctx := fanouttest.Context(t)
	if err := f.hub.Unsubscribe(ctx, key, a); err != nil {
		t.Fatal(err)
	}
	if err := f.hub.Unsubscribe(ctx, key, a); err != nil { // not subscribed: no-op
		t.Fatal(err)
	}
	if f.broker.unsubs != 0 {
		t.Fatal("broker unsubscribed while a subscriber remains")
	}
	if err := f.hub.Unsubscribe(ctx, key, b); err != nil {
		t.Fatal(err)
	}
	if f.broker.unsubs != 1 || f.hub.Channels() != 0 || f.hub.Subscriptions() != 0 {
		t.Fatalf("after last: broker unsubs %d, channels %d, subscriptions %d", f.broker.unsubs, f.hub.Channels(), f.hub.Subscriptions())
	}
	if err := f.hub.Unsubscribe(ctx, acme("never"), a); err != nil {
		t.Fatal(err)
	}
}

func TestHubBrokerSubscribeFailure(t *testing.T) {
	t.Parallel()
	f := newHubFixture(t)
	key := acme("x")
	boom := errors.New("boom")
	f.broker.failNext = boom
	s := fanouttest.NewSub(4)
	if err := f.hub.Subscribe(fanouttest.Context(t), key, s); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if f.hub.Channels() != 0 || f.hub.Subscriptions() != 0 {
		t.Fatal("failed subscription was counted")
	}
	fanouttest.MustPublish(t, f.broker, fanouttest.Msg(key, "m1"))
	if len(s.Drain()) != 0 {
		t.Fatal("failed subscriber received a publication")
	}
	f.subscribe(t, key, s)
	if f.broker.subs != 1 {
		t.Fatalf("broker subs = %d after retry", f.broker.subs)
	}
}

type funcSub func(*fanout.Prepared)

func (f funcSub) Deliver(p *fanout.Prepared) { f(p) }

func TestHubRejectsBadSubscribers(t *testing.T) {
	t.Parallel()
	f := newHubFixture(t)
	for _, s := range []fanout.Subscriber{nil, funcSub(func(*fanout.Prepared) {})} {
		if err := f.hub.Subscribe(fanouttest.Context(t), acme("x"), s); !errors.Is(err, fanout.ErrInvalidSubscriber) {
			t.Errorf("%T: err = %v, want ErrInvalidSubscriber", s, err)
		}
	}
	if _, err := fanout.NewHub(nil, fanout.HubConfig{}); !errors.Is(err, fanout.ErrInvalidConfig) {
		t.Errorf("nil broker: %v", err)
	}
}

func TestHubResync(t *testing.T) {
	t.Parallel()
	f := newHubFixture(t)
	key := acme("x")
	wants := fanouttest.ResyncSub{Sub: fanouttest.NewSub(1)}
	plain := fanouttest.NewSub(1)
	f.subscribe(t, key, wants)
	f.subscribe(t, key, plain)
	f.hub.HandleResync(key)
	f.hub.HandleResync(acme("nobody"))
	select {
	case k := <-wants.Resyncs:
		if k != key {
			t.Fatalf("resync for %v", k)
		}
	default:
		t.Fatal("ResyncSubscriber not told")
	}
	if len(plain.Resyncs) != 0 || len(wants.Resyncs) != 0 {
		t.Fatal("unexpected resync notices")
	}
	if _, _, resyncs := f.hub.Counters(); testutil.ToFloat64(resyncs) != 1 {
		t.Fatalf("herald_hub_resyncs_total = %v", testutil.ToFloat64(resyncs))
	}
}

func TestHubMetricsRegistrationConflict(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	mb := fanouttest.MemoryBroker(t, fanout.MemoryConfig{})
	if _, err := fanout.NewHub(mb, fanout.HubConfig{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := fanout.NewHub(mb, fanout.HubConfig{Registerer: reg}); err == nil {
		t.Fatal("second hub on one registry: want a registration error")
	}
}

// orderSub records the offsets it is handed and fails on overlapping
// Deliver calls.
type orderSub struct {
	t       *testing.T
	in      atomic.Bool
	offsets []uint64
	first   func() // called on the first Deliver, if set
}

func (s *orderSub) Deliver(p *fanout.Prepared) {
	if !s.in.CompareAndSwap(false, true) {
		s.t.Error("two Deliver calls on one subscriber at once")
		return
	}
	defer s.in.Store(false)
	if s.first != nil && len(s.offsets) == 0 {
		s.first()
	}
	s.offsets = append(s.offsets, p.Position().Offset)
}

// TestHubSharesOnePublication: a publication with many subscribers is
// handed to them by several goroutines at once, each subscriber gets
// every publication in order, and the broker's delivery returns only once
// all have it.
func TestHubSharesOnePublication(t *testing.T) {
	t.Parallel()
	mb := fanouttest.MemoryBroker(t, fanout.MemoryConfig{})
	hub := fanouttest.StartHub(t, mb, fanout.HubConfig{FanoutWorkers: 4, FanoutShare: 8})
	key := acme("room")
	const nsubs, npubs = 64, 20 // 4 shares of 16
	subs := make([]*orderSub, nsubs)
	for i := range subs {
		subs[i] = &orderSub{t: t}
	}
	// The first subscriber of the caller's share waits until the first
	// of another share was handed the first publication: the shares run
	// at once, or this test times out.
	reached := make(chan struct{})
	ctx := fanouttest.Context(t)
	subs[0].first = func() {
		select {
		case <-reached:
		case <-ctx.Done():
			t.Error("the shares of one publication ran one after another")
		}
	}
	subs[nsubs/4].first = func() { close(reached) }
	for _, s := range subs {
		if err := hub.Subscribe(ctx, key, s); err != nil {
			t.Fatal(err)
		}
	}
	for i := range npubs {
		fanouttest.MustPublish(t, mb, fanouttest.Msg(key, fmt.Sprint(i)))
		for j, s := range subs {
			if s.in.Load() || len(s.offsets) != i+1 {
				t.Fatalf("publish %d returned with subscriber %d holding %d publications", i, j, len(s.offsets))
			}
		}
	}
	for j, s := range subs {
		for i, off := range s.offsets {
			if off != uint64(i+1) {
				t.Fatalf("subscriber %d: delivery %d has offset %d", j, i, off)
			}
		}
	}
}

func TestHubConfigRejectsNegativeFanout(t *testing.T) {
	t.Parallel()
	mb := fanouttest.MemoryBroker(t, fanout.MemoryConfig{})
	for _, cfg := range []fanout.HubConfig{{FanoutWorkers: -1}, {FanoutShare: -1}} {
		if _, err := fanout.NewHub(mb, cfg); !errors.Is(err, fanout.ErrInvalidConfig) {
			t.Errorf("%+v: err = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// runSub is a fanouttest.Sub that also takes runs (RunSubscriber), counting them.
type runSub struct {
	*fanouttest.Sub
	runs atomic.Int64
}

func (s *runSub) DeliverRun(run []*fanout.Prepared) {
	s.runs.Add(1)
	for _, p := range run {
		s.Deliver(p)
	}
}

// TestPublishRun: a run of one channel's messages is published as
// Publish would each, in order (a repeated id answered with the
// publication already there, not handed out again), and handed to the
// hub once: a RunSubscriber takes it in one call, another subscriber one
// Deliver at a time. The run stops at the first message that fails (of
// another channel, or a stale fence), publishing none after it.
func TestPublishRun(t *testing.T) {
	f := newHubFixture(t)
	b := f.broker.MemoryBroker
	key := fanout.Key{Tenant: "acme", Channel: "orders"}
	rs, plain := &runSub{Sub: fanouttest.NewSub(64)}, fanouttest.NewSub(64)
	f.subscribe(t, key, rs)
	f.subscribe(t, key, plain)
	fanouttest.MustPublish(t, b, fanouttest.Msg(key, "a1"))
	rs.Drain()
	plain.Drain()

	out := make([]fanout.Publication, 3)
	n, err := b.PublishRun(fanouttest.Context(t), []fanout.Message{fanouttest.Msg(key, "a2"), fanouttest.Msg(key, "a1"), fanouttest.Msg(key, "a3")}, out)
	if err != nil || n != 3 {
		t.Fatalf("run: %d, %v", n, err)
	}
	if got := fanouttest.Offsets(out); fmt.Sprint(got) != "[2 1 3]" {
		t.Fatalf("run's offsets %v, want [2 1 3] (a1 already published)", got)
	}
	for name, s := range map[string]*fanouttest.Sub{"run subscriber": rs.Sub, "plain subscriber": plain} {
		var got []uint64
		for _, p := range s.Drain() {
			got = append(got, p.Position().Offset)
		}
		if fmt.Sprint(got) != "[2 3]" {
			t.Errorf("%s got offsets %v, want [2 3]", name, got)
		}
	}
	if rs.runs.Load() != 1 {
		t.Fatalf("%d runs delivered, want 1", rs.runs.Load())
	}

	other := fanout.Key{Tenant: "acme", Channel: "other"}
	n, err = b.PublishRun(fanouttest.Context(t), []fanout.Message{fanouttest.Msg(key, "a4"), fanouttest.Msg(other, "b1"), fanouttest.Msg(key, "a5")}, make([]fanout.Publication, 3))
	if n != 1 || !errors.Is(err, fanout.ErrInvalidMessage) {
		t.Fatalf("run with another channel's message: %d, %v; want 1, fanout.ErrInvalidMessage", n, err)
	}
	fenced := func(id string, v int64) fanout.Message {
		m := fanouttest.Msg(key, id)
		m.Fence = fanout.Fence{Scope: "p1", Value: v}
		return m
	}
	fanouttest.MustPublish(t, b, fenced("a5", 5))
	n, err = b.PublishRun(fanouttest.Context(t), []fanout.Message{fenced("a6", 4), fenced("a7", 6)}, make([]fanout.Publication, 2))
	if n != 0 || !errors.Is(err, fanout.ErrStaleFence) {
		t.Fatalf("run under a stale fence: %d, %v; want 0, fanout.ErrStaleFence", n, err)
	}
	if got := fanouttest.Offsets(fanouttest.MustRecover(t, b, key, fanout.Position{Epoch: out[0].Epoch}).Publications); fmt.Sprint(got) != "[1 2 3 4 5]" {
		t.Fatalf("history %v, want [1 2 3 4 5]", got)
	}

	// A handler that does not take runs gets each publication.
	b2 := fanouttest.MemoryBroker(t, fanout.MemoryConfig{})
	var got []uint64
	if err := b2.Start(fanouttest.Context(t), handlerFunc(func(p fanout.Publication) { got = append(got, p.Offset) })); err != nil {
		t.Fatal(err)
	}
	if n, err := b2.PublishRun(fanouttest.Context(t), []fanout.Message{fanouttest.Msg(key, "x1"), fanouttest.Msg(key, "x2")}, make([]fanout.Publication, 2)); n != 2 || err != nil {
		t.Fatalf("run: %d, %v", n, err)
	}
	if fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("handler got %v, want [1 2]", got)
	}
}

// handlerFunc is a Handler that is neither a PreparedHandler nor a
// RunHandler.
type handlerFunc func(p fanout.Publication)

func (f handlerFunc) HandlePublication(p fanout.Publication) { f(p) }
