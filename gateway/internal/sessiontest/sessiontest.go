// Package sessiontest builds the connection core's Env (internal/session)
// for the tests of the transports: over an in-memory broker and hub of its
// own, with counters nothing registers, stopped when the test ends. It is
// for tests only.
package sessiontest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/internal/ratelog"
)

// Core is a connection core of a test's own.
type Core struct {
	Env    *session.Env
	Broker *fanout.MemoryBroker
	Hub    *fanout.Hub
}

// Options configure New.
type Options struct {
	// Bounds are the connections' bounds; zero fields take the server's
	// defaults (gateway.Config's), and HistorySize and HistoryTTL those of
	// the broker.
	Bounds     session.Bounds
	History    int           // the broker's HistorySize; 0: its default
	HistoryTTL time.Duration // the broker's HistoryTTL; 0: its default
	// Recoverer wraps what the core recovers from (the broker).
	Recoverer func(session.History) session.History
	// QueueLimit counts connections closed as slow; nil: a counter of
	// its own.
	QueueLimit prometheus.Counter
}

// New returns a core for o; its writer pool, broker and hub stop when tb
// ends, after whatever the test registered to run at its end before.
func New(tb testing.TB, o Options) *Core {
	tb.Helper()
	broker, err := fanout.NewMemoryBroker(fanout.MemoryConfig{HistorySize: o.History, HistoryTTL: o.HistoryTTL})
	if err != nil {
		tb.Fatal(err)
	}
	hub := fanouttest.StartHub(tb, broker, fanout.HubConfig{})
	b := Defaults(o.Bounds)
	if b.HistorySize == 0 {
		b.HistorySize = o.History
	}
	if b.HistoryTTL == 0 {
		b.HistoryTTL = o.HistoryTTL
	}
	var history session.History = broker
	if o.Recoverer != nil {
		history = o.Recoverer(broker)
	}
	queueLimit := o.QueueLimit
	if queueLimit == nil {
		queueLimit = prometheus.NewCounter(prometheus.CounterOpts{Name: "herald_queue_limit_total"})
	}
	env := &session.Env{
		Bounds:   b,
		Hub:      hub,
		History:  history,
		Counters: counters(queueLimit),
		Log:      ratelog.New(slog.New(slog.DiscardHandler), 10*time.Second, 20),
		Writers:  session.NewWriterPool(),
	}
	tb.Cleanup(env.Writers.Stop)
	return &Core{Env: env, Broker: broker, Hub: hub}
}

// counters are the core's counters, registered nowhere, with queueLimit.
func counters(queueLimit prometheus.Counter) session.Counters {
	opts := func(name string) prometheus.CounterOpts { return prometheus.CounterOpts{Name: name} }
	return session.Counters{
		Deliveries:     prometheus.NewCounterVec(opts("herald_deliveries_total"), []string{"transport"}),
		QueueDropped:   prometheus.NewCounter(opts("herald_queue_dropped_total")),
		CatchUps:       prometheus.NewCounterVec(opts("herald_catchups_total"), []string{"transport"}),
		QueueLimit:     queueLimit,
		SubsEnded:      prometheus.NewCounterVec(opts("herald_subscriptions_ended_total"), []string{"transport", "reason"}),
		ReauthFailures: prometheus.NewCounter(opts("herald_reauth_failures_total")),
	}
}

// Defaults fills the zero fields of b with the server's defaults.
func Defaults(b session.Bounds) session.Bounds {
	setInt := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setDur := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	setInt(&b.QueueMaxBytes, 1<<20)
	setInt(&b.QueueMaxMessages, 1024)
	setInt(&b.MaxSubscriptions, 128)
	setInt(&b.MaxMessageSize, ws.DefaultMaxMessageSize)
	setInt(&b.MaxInflight, 16)
	setDur(&b.HeartbeatInterval, 15*time.Second)
	setDur(&b.WriteTimeout, 10*time.Second)
	setDur(&b.ConnectTimeout, 10*time.Second)
	setDur(&b.ClientTimeout, 60*time.Second)
	setDur(&b.RefreshAhead, 60*time.Second)
	setDur(&b.ExpiryGrace, 5*time.Second)
	return b
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
