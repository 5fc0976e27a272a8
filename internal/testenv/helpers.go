package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/heraldgw/herald/fanout"
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

// Publisher is a broker that takes publications (fanout.Broker).
type Publisher interface {
	Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error)
}

// Publish publishes data, a JSON value, on channel of tenant as an
// "order.updated" message of schema version 1.
func Publish(tb testing.TB, b Publisher, tenant, channel string, data string) fanout.Publication {
	tb.Helper()
	p, err := b.Publish(context.Background(), fanout.Message{
		ID:            fmt.Sprintf("m-%d", time.Now().UnixNano()),
		Key:           fanout.Key{Tenant: tenant, Channel: channel},
		Type:          "order.updated",
		SchemaVersion: 1,
		Data:          json.RawMessage(data),
	})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
