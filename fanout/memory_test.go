package fanout_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
)

func TestMemoryConfig(t *testing.T) {
	t.Parallel()
	got := fanout.MemoryConfig{}.WithDefaults()
	if got.HistorySize != 1000 || got.HistoryTTL != 24*time.Hour || got.MaxChannels != 100000 {
		t.Fatalf("defaults: %+v", got)
	}
	for _, cfg := range []fanout.MemoryConfig{{HistorySize: -1}, {HistoryTTL: -time.Second}, {MaxChannels: -5}} {
		if _, err := fanout.NewMemoryBroker(cfg); !errors.Is(err, fanout.ErrInvalidConfig) {
			t.Errorf("%+v: err = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// acme is the key of channel ch of tenant acme.
func acme(ch string) fanout.Key { return fanout.Key{Tenant: "acme", Channel: ch} }

// fakeClock is a settable clock for TTL tests.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestMemoryBrokerHistoryTTL(t *testing.T) {
	t.Parallel()
	b := fanouttest.MemoryBroker(t, fanout.MemoryConfig{HistoryTTL: time.Hour})
	clock := &fakeClock{}
	clock.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	b.SetClock(clock.now)
	key := acme("ttl")

	p1 := fanouttest.MustPublish(t, b, fanouttest.Msg(key, "m1"))
	clock.advance(59 * time.Minute)
	p2 := fanouttest.MustPublish(t, b, fanouttest.Msg(key, "m2"))
	if p2.Epoch != p1.Epoch || p2.Offset != 2 {
		t.Fatalf("publication within TTL: %v after %v", p2.Position, p1.Position)
	}
	clock.advance(61 * time.Minute)
	r := fanouttest.MustRecover(t, b, key, p1.Position)
	if r.Recovered || r.Top.Offset != 0 || r.Top.Epoch == p1.Epoch {
		t.Fatalf("recover after TTL: %+v (old epoch %s)", r, p1.Epoch)
	}
	p3 := fanouttest.MustPublish(t, b, fanouttest.Msg(key, "m3"))
	if p3.Offset != 1 || p3.Epoch != r.Top.Epoch {
		t.Fatalf("first publication after expiry at %v, want 1 in %s", p3.Position, r.Top.Epoch)
	}
	if p3.Time != clock.now().UTC() {
		t.Fatalf("zero Time not filled with the broker clock: %v", p3.Time)
	}
}

func TestMemoryBrokerMaxChannelsEvictsIdlest(t *testing.T) {
	t.Parallel()
	b := fanouttest.MemoryBroker(t, fanout.MemoryConfig{MaxChannels: 3})
	clock := &fakeClock{}
	b.SetClock(clock.now)
	first := make(map[string]fanout.Position)
	for _, ch := range []string{"a", "b", "c"} {
		clock.advance(time.Second)
		first[ch] = fanouttest.MustPublish(t, b, fanouttest.Msg(acme(ch), ch+"1")).Position
	}
	clock.advance(time.Second)
	fanouttest.MustPublish(t, b, fanouttest.Msg(acme("a"), "a2")) // a is now the most recent
	clock.advance(time.Second)
	fanouttest.MustPublish(t, b, fanouttest.Msg(acme("d"), "d1")) // evicts b, the idlest
	if n := b.Channels(); n != 3 {
		t.Fatalf("channels = %d, want 3", n)
	}
	if r := fanouttest.MustRecover(t, b, acme("a"), first["a"]); !r.Recovered || len(r.Publications) != 1 {
		t.Fatalf("a should be kept: %+v", r)
	}
	// Recovering b recreates it (evicting c): a new epoch, nothing recovered.
	r := fanouttest.MustRecover(t, b, acme("b"), first["b"])
	if r.Recovered || r.Top.Epoch == first["b"].Epoch || r.Top.Offset != 0 {
		t.Fatalf("evicted channel b: %+v", r)
	}
	if n := b.Channels(); n != 3 {
		t.Fatalf("channels after recreate = %d, want 3", n)
	}
}
