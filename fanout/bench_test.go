package fanout

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// counterSub counts deliveries.
type counterSub struct{ n atomic.Int64 }

func (s *counterSub) Deliver(*Prepared) { s.n.Add(1) }

// benchPublication is a typical notification: a uuid, a nested channel and
// a ~250-byte payload.
func benchPublication() Publication {
	return Publication{
		Message: Message{
			ID:            "0190a0b1-7c2d-7e3f-8a4b-5c6d7e8f9a0b",
			Key:           Key{Tenant: "acme", Channel: "users/u-1234/orders"},
			Type:          "order.updated",
			SchemaVersion: 3,
			Time:          time.Date(2025, 3, 4, 5, 6, 7, 891234567, time.UTC),
			Data: json.RawMessage(`{"order_id":"ord_8f2c1a","status":"shipped","carrier":"ups",` +
				`"tracking":"1Z999AA10123456784","items":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}],` +
				`"total":{"amount":"129.90","currency":"EUR"},"note":"Leave at the door \"please\""}`),
		},
		Position: Position{Offset: 123456, Epoch: "a1b2c3d4e5f60718"},
	}
}

// BenchmarkHubBroadcast delivers one channel's publications to 10,000
// local subscribers; deliveries/s counts Deliver calls.
func BenchmarkHubBroadcast(b *testing.B) {
	const subscribers = 10000
	setup := func(b *testing.B, mk func(i int) Subscriber) (*MemoryBroker, *Hub) {
		mb, err := NewMemoryBroker(MemoryConfig{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(mb.Stop)
		hub, err := NewHub(mb, HubConfig{})
		if err != nil {
			b.Fatal(err)
		}
		if err := mb.Start(context.Background(), hub); err != nil {
			b.Fatal(err)
		}
		for i := range subscribers {
			if err := hub.Subscribe(context.Background(), benchPublication().Key, mk(i)); err != nil {
				b.Fatal(err)
			}
		}
		return mb, hub
	}
	counter := func(int) Subscriber { return &counterSub{} }
	channel := func(int) Subscriber { return newChanSub(256) } // full after 256: drops, as a slow client

	run := func(b *testing.B, publish func(i int)) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n++
			publish(n)
		}
		b.ReportMetric(float64(n)*subscribers/b.Elapsed().Seconds(), "deliveries/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n)/subscribers, "ns/delivery")
	}

	b.Run("hub/counter", func(b *testing.B) {
		_, hub := setup(b, counter)
		pub := benchPublication()
		run(b, func(i int) { pub.Offset = uint64(i); hub.HandlePublication(pub) })
	})
	b.Run("hub/chan", func(b *testing.B) {
		_, hub := setup(b, channel)
		pub := benchPublication()
		run(b, func(i int) { pub.Offset = uint64(i); hub.HandlePublication(pub) })
	})
	b.Run("memory-broker/counter", func(b *testing.B) {
		mb, _ := setup(b, counter)
		m := benchPublication().Message
		ctx := context.Background()
		run(b, func(i int) {
			m.ID = strconv.Itoa(i) // a new id: a retained one would be skipped
			if _, err := mb.Publish(ctx, m); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkPrepared encodes one envelope; encoding/json is the baseline.
func BenchmarkPrepared(b *testing.B) {
	pub := benchPublication()
	b.Run("NewPrepared", func(b *testing.B) {
		b.ReportAllocs()
		var size int
		for b.Loop() {
			size = NewPrepared(pub).Size()
		}
		b.SetBytes(int64(size))
	})
	b.Run("encoding-json-baseline", func(b *testing.B) {
		b.ReportAllocs()
		var size int
		for b.Loop() {
			out, err := json.Marshal(wireEnvelope{
				ID: pub.ID, Channel: pub.Key.Channel, Offset: pub.Offset, Epoch: pub.Epoch, Type: pub.Type,
				SchemaVersion: pub.SchemaVersion, Time: pub.Time, Freshness: ImmediateFreshness, Data: pub.Data,
			})
			if err != nil {
				b.Fatal(err)
			}
			size = len(out)
		}
		b.SetBytes(int64(size))
	})
}
