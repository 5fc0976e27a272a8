package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// quantiles summarizes a latency sample.
type quantiles struct {
	N                   int
	P50, P99, P999, Max time.Duration
}

// MarshalJSON writes the quantiles in milliseconds.
func (q quantiles) MarshalJSON() ([]byte, error) {
	f := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return json.Marshal(map[string]any{"n": q.N, "p50_ms": f(q.P50), "p99_ms": f(q.P99), "p999_ms": f(q.P999), "max_ms": f(q.Max)})
}

// summarize sorts d in place and reads its quantiles (nearest rank), as
// outboxbench does.
func summarize(d []time.Duration) quantiles {
	if len(d) == 0 {
		return quantiles{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(d)) + 0.5)
		return d[min(max(i-1, 0), len(d)-1)]
	}
	return quantiles{N: len(d), P50: at(0.50), P99: at(0.99), P999: at(0.999), Max: d[len(d)-1]}
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// rate is n per second over d (0 when d is not positive).
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// perRecordMicros is d per record, in microseconds.
func perRecordMicros(d time.Duration, records int) float64 {
	if records <= 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(records)
}

// thousands formats n with thousands separators ("200,000").
func thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
