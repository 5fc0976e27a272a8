// Package benchkit holds what the outbox benchmarks (loadtest/outboxbench
// for Herald, loadtest/cfbench for Centrifugo) share, so that their
// numbers are computed the same way: latency quantiles and formatting,
// phase lists, polling, paced and unpaced producers, CPU accounting from
// /proc and a few PostgreSQL helpers.
package benchkit

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Quantiles summarizes a latency sample.
type Quantiles struct {
	N                   int
	P50, P99, P999, Max time.Duration
}

// MarshalJSON writes the quantiles in milliseconds:
// {"n", "p50_ms", "p99_ms", "p999_ms", "max_ms"}.
func (q Quantiles) MarshalJSON() ([]byte, error) {
	f := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return json.Marshal(map[string]any{"n": q.N, "p50_ms": f(q.P50), "p99_ms": f(q.P99), "p999_ms": f(q.P999), "max_ms": f(q.Max)})
}

// Summarize sorts d in place and reads its quantiles (nearest rank). An
// empty sample gives the zero Quantiles.
func Summarize(d []time.Duration) Quantiles {
	if len(d) == 0 {
		return Quantiles{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(d)) + 0.5)
		return d[min(max(i-1, 0), len(d)-1)]
	}
	return Quantiles{N: len(d), P50: at(0.50), P99: at(0.99), P999: at(0.999), Max: d[len(d)-1]}
}

// MS formats a duration in milliseconds, two decimals ("1.50 ms").
func MS(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// PerRecordMicros is d per record, in microseconds (0 when records is not
// positive).
func PerRecordMicros(d time.Duration, records int) float64 {
	if records <= 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(records)
}

// OnOff is "on" for true and "off" for false.
func OnOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// Mean is the arithmetic mean of v (NaN when v is empty).
func Mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}
