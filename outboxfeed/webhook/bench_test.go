package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/hookrecv"
)

// startBenchReceiver runs the receiver in a child process (see TestMain),
// so the benchmark's CPU time (getrusage of this process) is the
// sender's alone.
func startBenchReceiver(b *testing.B) string {
	b.Helper()
	rc, err := hookrecv.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = rc.Stop() })
	return rc.URL
}

// benchMessages are distinct records of a realistic size (a ~170-byte
// payload).
func benchMessages() []Message {
	ms := make([]Message, 1024)
	for i := range ms {
		ms[i] = Message{
			ID:            fmt.Sprintf("0f8fad5b-d9cb-469f-a165-%012d", i),
			Tenant:        "acme",
			Channel:       fmt.Sprintf("billing/customers/%d", i%97),
			Kind:          "integration_event",
			Type:          "invoice.paid",
			SchemaVersion: 2,
			Time:          time.Date(2025, 3, 1, 10, 15, 30, i*1000, time.UTC),
			Data: json.RawMessage(fmt.Sprintf(`{"invoice":"in_%06d","customer":"cus_%06d","amount":%d,"currency":"EUR",`+
				`"lines":[{"sku":"plan-pro","quantity":1,"unit_amount":%d}],"paid_at":"2025-03-01T10:15:30Z"}`, i, i%97, 1000+i, 1000+i)),
		}
	}
	return ms
}

// cpuTime is this process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runConcurrent calls send(i) for i in [0, b.N) from workers goroutines
// and reports records/s and CPU µs per record.
func runConcurrent(b *testing.B, workers int, send func(i int) error) {
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	cpu0, t0 := cpuTime(b), time.Now()
	b.ResetTimer()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := send(i); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	el, cpu := time.Since(t0), cpuTime(b)-cpu0
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "records/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/record")
}

// BenchmarkDeliver: Deliver at the default max_in_flight (16 concurrent
// senders) to a receiver in another process that answers 204, beside the
// floor — a bare net/http client POSTing the same bodies with the same
// concurrency and keep-alive. docs/performance.md has the command and
// the numbers.
func BenchmarkDeliver(b *testing.B) {
	msgs := benchMessages()
	url := startBenchReceiver(b)
	workers := Config{}.WithDefaults().MaxInFlight

	b.Run("herald", func(b *testing.B) {
		cfg := Config{Name: "bench", URL: url, Secret: testSecretA, AllowPrivateNetwork: true}
		e, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		ctx := context.Background()
		b.ReportAllocs()
		runConcurrent(b, workers, func(i int) error {
			if r := e.Deliver(ctx, msgs[i%len(msgs)]); r.Class != ClassDelivered {
				return fmt.Errorf("result %v/%s: %v", r.Class, r.Reason, r.Err)
			}
			return nil
		})
	})

	b.Run("floor", func(b *testing.B) {
		bodies := make([][]byte, len(msgs))
		for i := range msgs {
			bodies[i], _ = AppendBody(nil, &msgs[i])
		}
		floor := hookrecv.NewFloor(url, workers)
		defer floor.Close()
		b.ReportAllocs()
		runConcurrent(b, workers, func(i int) error { return floor.Post(bodies[i%len(bodies)]) })
	})
}

// BenchmarkAppendBody: encoding one record's body.
func BenchmarkAppendBody(b *testing.B) {
	msgs := benchMessages()
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		var err error
		if buf, err = AppendBody(buf[:0], &msgs[i%len(msgs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSign: the webhook-signature of one record's body, one secret.
func BenchmarkSign(b *testing.B) {
	m := benchMessages()[0]
	body, _ := AppendBody(nil, &m)
	s, err := NewSigner(testSecretA)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = s.AppendSign(buf[:0], m.ID, 1740823530, body)
	}
}
