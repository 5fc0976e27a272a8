package main

import (
	"fmt"
	"slices"
	"time"
)

// quantiles summarizes a latency sample.
type quantiles struct {
	N                   int
	P50, P99, P999, Max time.Duration
}

// summarize sorts d in place and reads its quantiles (nearest rank).
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

// perSecond formats a rate.
func perSecond(n int64, d time.Duration) string {
	if d <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f/s", float64(n)/d.Seconds())
}
