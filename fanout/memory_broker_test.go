package fanout_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
)

func TestMemoryBrokerRecover(t *testing.T) {
	t.Parallel()
	fanouttest.RunRecover(t, func(t *testing.T) fanout.Broker {
		return fanouttest.MemoryBroker(t, fanout.MemoryConfig{HistorySize: 3})
	})
}

func TestMemoryBrokerFence(t *testing.T) {
	t.Parallel()
	fanouttest.RunFence(t, func(t *testing.T, historySize int) fanout.Broker {
		return fanouttest.MemoryBroker(t, fanout.MemoryConfig{HistorySize: historySize})
	})
}

// TestMemoryBrokerFenceIsPerScope: the newest fence value holds for the
// scope across channels, and across a channel's expiry and eviction.
func TestMemoryBrokerFenceIsPerScope(t *testing.T) {
	t.Parallel()
	b := fanouttest.MemoryBroker(t, fanout.MemoryConfig{MaxChannels: 1})
	fanouttest.MustPublish(t, b, fanouttest.Fenced(fanout.Key{Tenant: "acme", Channel: "a"}, "m1", fanout.Fence{Scope: "p1", Value: 2}))
	fanouttest.MustPublish(t, b, fanouttest.Msg(fanout.Key{Tenant: "acme", Channel: "b"}, "evicts a"))
	for _, k := range []fanout.Key{{"acme", "a"}, {"acme", "b"}, {"other", "c"}} {
		fanouttest.MustBeStale(t, b, fanouttest.Fenced(k, "m2", fanout.Fence{Scope: "p1", Value: 1}))
	}
	if n := len(fanouttest.History(t, b, fanout.Key{Tenant: "acme", Channel: "a"})); n != 0 {
		t.Fatalf("evicted channel holds %d publications after refusals", n)
	}
}

func TestMemoryBrokerLifecycle(t *testing.T) {
	t.Parallel()
	b := fanouttest.MemoryBroker(t, fanout.MemoryConfig{})
	key := fanout.Key{Tenant: "acme", Channel: "life"}
	before := fanouttest.MustPublish(t, b, fanouttest.Msg(key, "before-start"))
	if before.Offset != 1 {
		t.Fatalf("publish before start: %v", before.Position)
	}
	rec := fanouttest.NewRecorder()
	if err := b.Start(fanouttest.Context(t), rec); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(fanouttest.Context(t), rec); !errors.Is(err, fanout.ErrAlreadyStarted) {
		t.Fatalf("second start: %v", err)
	}
	fanouttest.MustPublish(t, b, fanouttest.Msg(key, "after-start"))
	pubs := rec.Snapshot()
	if len(pubs) != 1 || pubs[0].ID != "after-start" || pubs[0].Offset != 2 {
		t.Fatalf("handler got %+v", pubs)
	}
	if err := b.Ping(fanouttest.Context(t)); err != nil {
		t.Fatal(err)
	}
	b.Stop()
	b.Stop()
	fanouttest.MustPublish(t, b, fanouttest.Msg(key, "after-stop"))
	if len(rec.Snapshot()) != 1 {
		t.Fatal("handler called after Stop")
	}
	if err := b.Start(fanouttest.Context(t), rec); !errors.Is(err, fanout.ErrStopped) {
		t.Fatalf("start after stop: %v", err)
	}
	if r := fanouttest.MustRecover(t, b, key, fanout.Position{Offset: 0, Epoch: before.Epoch}); !r.Recovered || len(r.Publications) != 3 {
		t.Fatalf("history after stop: %+v", r)
	}
}

func TestMemoryBrokerStopBeforeStart(t *testing.T) {
	t.Parallel()
	b := fanouttest.MemoryBroker(t, fanout.MemoryConfig{})
	b.Stop()
	b.Stop()
}

// TestMemoryBrokerConcurrentPublishOrder publishes to one channel from many
// goroutines: the handler must see offsets 1..n in order.
func TestMemoryBrokerConcurrentPublishOrder(t *testing.T) {
	t.Parallel()
	b := fanouttest.MemoryBroker(t, fanout.MemoryConfig{})
	rec := fanouttest.NewRecorder()
	if err := b.Start(fanouttest.Context(t), rec); err != nil {
		t.Fatal(err)
	}
	key := fanout.Key{Tenant: "acme", Channel: "busy"}
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if _, err := b.Publish(fanouttest.Context(t), fanouttest.Msg(key, fmt.Sprintf("w%d-%d", w, i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	pubs := rec.Snapshot()
	if len(pubs) != workers*each {
		t.Fatalf("handler got %d publications, want %d", len(pubs), workers*each)
	}
	for i, p := range pubs {
		if p.Offset != uint64(i+1) {
			t.Fatalf("delivery %d has offset %d", i, p.Offset)
		}
	}
}

func TestMemoryBrokerCopiesMessageBytes(t *testing.T) {
	t.Parallel()
	b := fanouttest.MemoryBroker(t, fanout.MemoryConfig{})
	key := fanout.Key{Tenant: "acme", Channel: "copy"}
	m := fanouttest.Msg(key, "m1")
	p := fanouttest.MustPublish(t, b, m)
	for i := range m.Data {
		m.Data[i] = ' '
	}
	r := fanouttest.MustRecover(t, b, key, fanout.Position{Offset: 0, Epoch: p.Epoch})
	if string(r.Publications[0].Data) != `{"id":"m1"}` {
		t.Fatalf("history changed with the caller's buffer: %s", r.Publications[0].Data)
	}
}

func TestMemoryBrokerIdempotent(t *testing.T) {
	t.Parallel()
	fanouttest.RunIdempotent(t, func(t *testing.T, historySize int) fanout.Broker {
		return fanouttest.MemoryBroker(t, fanout.MemoryConfig{HistorySize: historySize})
	}, func(t *testing.T) (fanout.Broker, func(*testing.T, fanout.Message) fanout.Publication) {
		b := fanouttest.MemoryBroker(t, fanout.MemoryConfig{})
		// In process no answer is lost on its way: the caller publishes
		// again as if the first answer never came.
		return b, func(t *testing.T, m fanout.Message) fanout.Publication {
			fanouttest.MustPublish(t, b, m)
			return fanouttest.MustPublish(t, b, m)
		}
	})
}
