package sse

import (
	"bytes"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/sessiontest"
)

// countOut is an Out that counts the publications it is handed.
type countOut struct {
	discardOut
	n     atomic.Int64
	wrote chan struct{} // capacity 1: "n grew"
}

func (o *countOut) Write(buf []byte) error {
	o.n.Add(int64(bytes.Count(buf[Room:], []byte("\ndata: "))))
	select {
	case o.wrote <- struct{}{}:
	default:
	}
	return o.discardOut.Write(buf)
}

// waitFor waits until n publications were written.
func (o *countOut) waitFor(n int64) {
	for o.n.Load() < n {
		<-o.wrote
	}
}

// BenchmarkWriterSSE measures the connection's writer alone, per
// publication: Deliver's enqueue from the hub's side, the writer's rounds
// on its kept goroutine and the SSE framing, into an out that discards
// what it gets. Publications are prepared ahead, outside the timer, 64K
// at a time.
func BenchmarkWriterSSE(b *testing.B) {
	const chunk = 1 << 16
	core := sessiontest.New(b, sessiontest.Options{Bounds: session.Bounds{
		QueueMaxMessages: 2 * chunk, QueueMaxBytes: 1 << 30, HeartbeatInterval: time.Hour, ClientTimeout: 2 * time.Hour,
	}})
	out := &countOut{wrote: make(chan struct{}, 1)}
	c := startBenchWriter(b, core.Env, out)
	pubs := make([]*fanout.Prepared, 0, chunk)
	b.ReportAllocs()
	for done := 0; done < b.N; {
		b.StopTimer()
		pubs = pubs[:0]
		for i := done; i < min(b.N, done+chunk); i++ {
			pubs = append(pubs, fanout.NewPrepared(fanout.Publication{
				Message: fanout.Message{
					ID: "0190a0b1-7c2d-7e3f-8a4b-5c6d7e8f9a0b", Key: fanout.Key{Tenant: "acme", Channel: "orders/1"},
					Type: "order.updated", Data: json.RawMessage(`{"order_id":"ord_8f2c1a","status":"shipped"}`),
				},
				Position: fanout.Position{Epoch: "0190a0b1-7c2d-7e3f", Offset: uint64(i + 1)},
			}))
		}
		b.StartTimer()
		for _, p := range pubs {
			c.Deliver(p)
		}
		done += len(pubs)
		out.waitFor(int64(done))
	}
}

// startBenchWriter returns a connection of env subscribed to orders/1
// (not on the hub) whose writer writes SSE into out.
func startBenchWriter(b *testing.B, env *session.Env, out Out) *session.Conn {
	claims := &auth.Claims{Tenant: "acme", Subject: "u1"}
	c := session.New(env, 1, "sse", claims, "bench")
	c.Out = NewSink(out, time.Minute)
	c.Pos.Add("orders/1", fanout.Position{Epoch: "0190a0b1-7c2d-7e3f"})
	c.StartWriting()
	b.Cleanup(func() {
		c.Close(session.ReasonClientClosed, 0)
		<-c.FinalDone
	})
	return c
}
