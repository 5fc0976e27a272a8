package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/cfoutbox"
)

// cfNamespace is the Centrifugo namespace of the run's channels: history
// on, so every publication carries its offset as Herald's do.
const cfNamespace = "bench"

// cfConfig is Centrifugo v6's JSON config for a run (key names as in
// v6.9.1's internal/config): one namespace with history and client-side
// subscriptions, the server API behind a key, Prometheus metrics on the
// client port (for the Go runtime figures), warnings only in the log,
// and with consumer (-publish-via outbox) its PostgreSQL outbox consumer.
func cfConfig(port int, secret, apiKey string, consumer *cfoutbox.Consumer) ([]byte, error) {
	cfg := benchkit.NewCentrifugoConfig(port, "warn", apiKey, secret, cfNamespace, 1000)
	cfg.Prometheus.Enabled = true
	if consumer != nil {
		cfg.Consumers = []cfoutbox.ConsumerConfig{consumer.Config()}
	}
	return cfg.JSON()
}

// startCentrifugo starts cfg.CentrifugoBin as the server under load, on a
// free loopback port, with a config written into a temporary directory
// (removed by stop), and waits until /health answers 200 and, with
// consumer, until the consumer drains its (already created) table.
func startCentrifugo(ctx context.Context, cfg config, consumer *cfoutbox.Consumer) (*target, error) {
	return inTempDir("connbench-cf-", func(dir string) (_ *target, err error) {
		port, err := benchkit.FreePort()
		if err != nil {
			return nil, err
		}
		t := &target{
			name: "centrifugo", secret: benchkit.RandomHex(32), apiKey: benchkit.RandomHex(16), dir: dir,
			base: "http://127.0.0.1:" + strconv.Itoa(port),
		}
		t.cfOutbox = consumer
		body, err := cfConfig(port, t.secret, t.apiKey, consumer)
		if err != nil {
			return nil, err
		}
		if t.child, err = benchkit.StartCentrifugo(cfg.CentrifugoBin, dir, "centrifugo", body); err != nil {
			return nil, fmt.Errorf("connbench: %w", err)
		}
		t.pid = t.child.PID
		if err := waitOK(ctx, t, "/health"); err != nil {
			return t, err
		}
		t.desc = fmt.Sprintf("child Centrifugo (%s, pid %d, in-memory broker, namespace %q with history)", cfg.CentrifugoBin, t.pid, cfNamespace)
		if consumer != nil {
			if err := warmCFOutbox(ctx, consumer, 30*time.Second); err != nil {
				return t, fmt.Errorf("%w\n%s", err, t.logTail())
			}
			t.desc = fmt.Sprintf("child Centrifugo (%s, pid %d, in-memory broker, namespace %q with history, %s)",
				cfg.CentrifugoBin, t.pid, cfNamespace, describeCF(consumer))
		}
		return t, nil
	})
}

// cfAPI calls Centrifugo's server API method with body and decodes its
// result into out.
func cfAPI(ctx context.Context, hc *http.Client, t *target, method string, body, out any) error {
	if err := benchkit.CentrifugoAPI(ctx, hc, t.base, t.apiKey, method, body, out); err != nil {
		return fmt.Errorf("connbench: %w", err)
	}
	return nil
}
