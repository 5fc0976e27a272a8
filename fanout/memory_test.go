package fanout

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func newTestMemoryBroker(t *testing.T, cfg MemoryConfig) *MemoryBroker {
	t.Helper()
	b, err := NewMemoryBroker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b
}

func TestMemoryConfig(t *testing.T) {
	t.Parallel()
	got := MemoryConfig{}.withDefaults()
	if got.HistorySize != 1000 || got.HistoryTTL != 24*time.Hour || got.MaxChannels != 100000 {
		t.Fatalf("defaults: %+v", got)
	}
	for _, cfg := range []MemoryConfig{{HistorySize: -1}, {HistoryTTL: -time.Second}, {MaxChannels: -5}} {
		if _, err := NewMemoryBroker(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: err = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// fakeClock is a settable clock for TTL tests.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestMemoryBrokerHistoryTTL(t *testing.T) {
	t.Parallel()
	b := newTestMemoryBroker(t, MemoryConfig{HistoryTTL: time.Hour})
	clock := &fakeClock{}
	clock.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	b.now = clock.now
	key := Key{"acme", "ttl"}

	p1 := mustPublish(t, b, msg(key, "m1"))
	clock.advance(59 * time.Minute)
	p2 := mustPublish(t, b, msg(key, "m2"))
	if p2.Epoch != p1.Epoch || p2.Offset != 2 {
		t.Fatalf("publication within TTL: %v after %v", p2.Position, p1.Position)
	}
	clock.advance(61 * time.Minute)
	r := mustRecover(t, b, key, p1.Position)
	if r.Recovered || r.Top.Offset != 0 || r.Top.Epoch == p1.Epoch {
		t.Fatalf("recover after TTL: %+v (old epoch %s)", r, p1.Epoch)
	}
	p3 := mustPublish(t, b, msg(key, "m3"))
	if p3.Offset != 1 || p3.Epoch != r.Top.Epoch {
		t.Fatalf("first publication after expiry at %v, want 1 in %s", p3.Position, r.Top.Epoch)
	}
	if p3.Time != clock.now().UTC() {
		t.Fatalf("zero Time not filled with the broker clock: %v", p3.Time)
	}
}

func TestMemoryBrokerMaxChannelsEvictsIdlest(t *testing.T) {
	t.Parallel()
	b := newTestMemoryBroker(t, MemoryConfig{MaxChannels: 3})
	clock := &fakeClock{}
	b.now = clock.now
	first := make(map[string]Position)
	for _, ch := range []string{"a", "b", "c"} {
		clock.advance(time.Second)
		first[ch] = mustPublish(t, b, msg(Key{"acme", ch}, ch+"1")).Position
	}
	clock.advance(time.Second)
	mustPublish(t, b, msg(Key{"acme", "a"}, "a2")) // a is now the most recent
	clock.advance(time.Second)
	mustPublish(t, b, msg(Key{"acme", "d"}, "d1")) // evicts b, the idlest
	if n := b.Channels(); n != 3 {
		t.Fatalf("channels = %d, want 3", n)
	}
	if r := mustRecover(t, b, Key{"acme", "a"}, first["a"]); !r.Recovered || len(r.Publications) != 1 {
		t.Fatalf("a should be kept: %+v", r)
	}
	// Recovering b recreates it (evicting c): a new epoch, nothing recovered.
	r := mustRecover(t, b, Key{"acme", "b"}, first["b"])
	if r.Recovered || r.Top.Epoch == first["b"].Epoch || r.Top.Offset != 0 {
		t.Fatalf("evicted channel b: %+v", r)
	}
	if n := b.Channels(); n != 3 {
		t.Fatalf("channels after recreate = %d, want 3", n)
	}
}
