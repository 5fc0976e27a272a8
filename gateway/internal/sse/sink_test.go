package sse

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
)

// discardOut is an Out that drops what it is given.
type discardOut struct{ bytes int }

func (o *discardOut) Write(buf []byte) error      { o.bytes += len(buf) - Room; return nil }
func (o *discardOut) Flush() error                { return nil }
func (o *discardOut) SetDeadline(time.Time) error { return nil }
func (o *discardOut) Abort()                      {}
func (o *discardOut) Finish(bool)                 {}
func (o *discardOut) Kill()                       {}

// sinkDeliveries returns a function that writes one more publication of
// channel 0 of a stream of channels channels to sink, as the writer does
// for a live delivery (its position advances), flushing every 16.
func sinkDeliveries(channels int) (*discardOut, func()) {
	out := &discardOut{}
	sink := NewSink(out, time.Minute)
	pos := session.NewPositions("acme", channels)
	for i := range channels {
		pos.Add(fmt.Sprintf("users/u-%d/orders", i), fanout.Position{Epoch: "0190a0b1-7c2d-7e3f", Offset: 1000})
	}
	p := fanout.NewPrepared(fanout.Publication{
		Message: fanout.Message{
			ID: "0190a0b1-7c2d-7e3f-8a4b-5c6d7e8f9a0b", Key: fanout.Key{Tenant: "acme", Channel: "users/u-0/orders"},
			Type: "order.updated", Data: json.RawMessage(`{"order_id":"ord_8f2c1a","status":"shipped"}`),
		},
		Position: fanout.Position{Epoch: "0190a0b1-7c2d-7e3f", Offset: 1001},
	})
	n := 0
	return out, func() {
		pos.Entries[0].Pos.Offset++
		_ = sink.Publication(p, pos)
		if n++; n%16 == 0 {
			_ = sink.Flush()
		}
	}
}

// TestSSEPublicationAllocs: writing a publication with its id (the
// stream's cursor, encoded for this connection) costs no allocation.
func TestSSEPublicationAllocs(t *testing.T) {
	for _, channels := range []int{1, 8} {
		_, deliver := sinkDeliveries(channels)
		if n := testing.AllocsPerRun(1000, deliver); n != 0 {
			t.Fatalf("%d channels: %.1f allocations per publication, want 0", channels, n)
		}
	}
}

// BenchmarkSSEPublication measures the SSE framing of one delivery: the
// connection's cursor as its id, the shared envelope as its data. Run with
// -benchmem: 0 allocs/op.
func BenchmarkSSEPublication(b *testing.B) {
	for _, channels := range []int{1, 8} {
		b.Run(fmt.Sprintf("channels=%d", channels), func(b *testing.B) {
			out, deliver := sinkDeliveries(channels)
			b.ReportAllocs()
			for b.Loop() {
				deliver()
			}
			b.SetBytes(int64(out.bytes / max(1, b.N)))
		})
	}
}
