package testenv

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Eventually polls cond every few milliseconds until it holds, failing tb
// after timeout.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// MetricValue reads the value of one counter or gauge series.
func MetricValue(tb testing.TB, m prometheus.Metric) float64 {
	tb.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		tb.Fatal(err)
	}
	switch {
	case out.Counter != nil:
		return out.Counter.GetValue()
	case out.Gauge != nil:
		return out.Gauge.GetValue()
	}
	tb.Fatalf("not a counter or gauge: %v", m.Desc())
	return 0
}
