package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// counterSub counts deliveries.
type counterSub struct{ n atomic.Int64 }

func (s *counterSub) Deliver(*Prepared) { s.n.Add(1) }

// queueSub queues deliveries, dropping them when full.
type queueSub chan *Prepared

func (s queueSub) Deliver(p *Prepared) {
	select {
	case s <- p:
	default:
	}
}

// benchPublication is a typical notification: a uuid, a nested channel and
// a ~250-byte payload.
func benchPublication() Publication {
	p := samplePublication()
	p.Key.Channel = "users/u-1234/orders"
	p.SchemaVersion = 3
	p.Time = time.Date(2025, 3, 4, 5, 6, 7, 891234567, time.UTC)
	p.Data = json.RawMessage(`{"order_id":"ord_8f2c1a","status":"shipped","carrier":"ups",` +
		`"tracking":"1Z999AA10123456784","items":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}],` +
		`"total":{"amount":"129.90","currency":"EUR"},"note":"Leave at the door \"please\""}`)
	p.Offset = 123456
	return p
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
	channel := func(int) Subscriber { return make(queueSub, 256) } // full after 256: drops, as a slow client

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

// BenchmarkMemoryPublish measures publications with and without the
// history log, over 1,000 channels, from many goroutines.
func BenchmarkMemoryPublish(b *testing.B) {
	for _, logged := range []bool{false, true} {
		b.Run(fmt.Sprintf("log=%v", logged), func(b *testing.B) {
			cfg := MemoryConfig{}
			if logged {
				cfg.HistoryDir = b.TempDir()
			}
			br, err := NewMemoryBroker(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer br.Stop()
			msgs := make([]Message, 1000)
			for i := range msgs {
				msgs[i] = benchPublication().Message
				msgs[i].Key.Channel = fmt.Sprintf("orders/%d", i)
				msgs[i].ID = fmt.Sprintf("m%d", i)
			}
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(16) // as the Worker publishes many channels at once
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := br.Publish(ctx, msgs[next.Add(1)%int64(len(msgs))]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkMemoryPublishDrain publishes as an outbox drain does: fenced
// messages with new ids (uuid-long), 100 on each of 1,000 channels, into
// a broker that starts empty every 100,000 publications (so the histories
// grow as a drain's do), from 32 goroutines each taking whole channels.
func BenchmarkMemoryPublishDrain(b *testing.B) {
	const channels, perChannel, workers = 1000, 100, 32
	msgs := make([][]Message, channels)
	for c := range msgs {
		msgs[c] = make([]Message, perChannel)
		for i := range msgs[c] {
			m := &msgs[c][i]
			*m = benchPublication().Message
			m.Key.Channel = fmt.Sprintf("bench/%d", c)
			m.ID = fmt.Sprintf("0193a5c2-7e1f-7%03x-8%03x-%012x", c, i, c*perChannel+i)
			m.Data = json.RawMessage(fmt.Sprintf(`{"n":%d,"note":"outbox benchmark record"}`, c*perChannel+i))
			m.Freshness = ImmediateFreshness
			m.Fence = Fence{Scope: "outbox/p" + strconv.Itoa(c%4), Value: 1}
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += channels * perChannel {
		b.StopTimer()
		br, err := NewMemoryBroker(MemoryConfig{})
		if err != nil {
			b.Fatal(err)
		}
		var next atomic.Int64
		left := int64(min(b.N-done, channels*perChannel))
		b.StartTimer()
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					c := int(next.Add(1)) - 1
					if c >= channels {
						return
					}
					for i := range msgs[c] {
						if int64(i*channels+c) >= left {
							break
						}
						if _, err := br.Publish(ctx, msgs[c][i]); err != nil {
							b.Error(err)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		br.Stop()
		b.StartTimer()
	}
}
