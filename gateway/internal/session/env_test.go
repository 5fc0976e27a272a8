package session

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
	"github.com/heraldgw/herald/internal/ratelog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// coreEnv is an Env over an in-memory broker and hub of its own, for the
// core's tests: no server, no transport.
type coreEnv struct {
	t      *testing.T
	env    *Env
	broker *fanout.MemoryBroker
	ids    atomic.Uint64
	seq    atomic.Uint64
}

// newCoreEnv returns an Env with b (zero fields get the server's
// defaults) over a broker keeping history publications per channel,
// stopped when t ends.
func newCoreEnv(t *testing.T, history int, b Bounds) *coreEnv {
	t.Helper()
	return newCoreEnvWith(t, fanout.MemoryConfig{HistorySize: history}, b)
}

// newCoreEnvWith is newCoreEnv over a broker configured by mc.
func newCoreEnvWith(t *testing.T, mc fanout.MemoryConfig, b Bounds) *coreEnv {
	t.Helper()
	history := mc.HistorySize
	broker, err := fanout.NewMemoryBroker(mc)
	if err != nil {
		t.Fatal(err)
	}
	hub := fanouttest.StartHub(t, broker, fanout.HubConfig{})
	if b.QueueMaxBytes == 0 {
		b.QueueMaxBytes = 1 << 20
	}
	if b.QueueMaxMessages == 0 {
		b.QueueMaxMessages = 1024
	}
	if b.MaxSubscriptions == 0 {
		b.MaxSubscriptions = 100
	}
	if b.HeartbeatInterval == 0 {
		b.HeartbeatInterval = 25 * time.Second
	}
	if b.WriteTimeout == 0 {
		b.WriteTimeout = 10 * time.Second
	}
	b.HistorySize = history
	writers := NewWriterPool()
	t.Cleanup(writers.Stop)
	counter := func(name string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name})
	}
	vec := func(name string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name}, labels)
	}
	env := &Env{
		Bounds:  b,
		Hub:     hub,
		History: broker,
		Counters: Counters{
			Deliveries:     vec("deliveries", "transport"),
			QueueDropped:   counter("queue_dropped"),
			CatchUps:       vec("catch_ups", "transport"),
			QueueLimit:     counter("queue_limit"),
			SubsEnded:      vec("subscriptions_ended", "transport", "reason"),
			ReauthFailures: counter("reauth_failures"),
		},
		Log:     ratelog.New(slog.New(slog.NewTextHandler(io.Discard, nil)), 10*time.Second, 20),
		Writers: writers,
	}
	return &coreEnv{t: t, env: env, broker: broker}
}

// nextID returns a connection id.
func (e *coreEnv) nextID() uint64 { return e.ids.Add(1) }

// publish publishes data to tenant's channel.
func (e *coreEnv) publish(tenant, channel, data string) fanout.Publication {
	e.t.Helper()
	key := fanout.Key{Tenant: tenant, Channel: channel}
	msg := fanout.Message{ID: fmt.Sprint("m", e.seq.Add(1)), Key: key, Type: "t", Data: json.RawMessage(data)}
	p, err := e.broker.Publish(context.Background(), msg)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// publishRun publishes n messages of one channel as one run
// (fanout.RunPublisher).
func (e *coreEnv) publishRun(tenant, channel string, n int) {
	e.t.Helper()
	key := fanout.Key{Tenant: tenant, Channel: channel}
	msgs := make([]fanout.Message, n)
	for i := range msgs {
		msgs[i] = fanout.Message{ID: fmt.Sprint("m", e.seq.Add(1)), Key: key, Type: "t", Data: json.RawMessage(`1`)}
	}
	if k, err := e.broker.PublishRun(context.Background(), msgs, make([]fanout.Publication, n)); err != nil || k != n {
		e.t.Fatalf("run of %d: %d published, %v", n, k, err)
	}
}

// counter reads the value of one counter series.
func (e *coreEnv) counter(c prometheus.Counter) float64 { return testutil.ToFloat64(c) }
