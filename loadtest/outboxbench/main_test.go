package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heraldgw/herald/internal/hookrecv"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/loadtest/internal/benchtest"
)

func TestMain(m *testing.M) {
	hookrecv.MaybeServe() // -webhook's receiver process is this test binary
	goleak.VerifyTestMain(m)
}

// A tiny -webhook run: drain and latency run alone and beside a webhook
// handler, each handler's records are all dispatched (run checks), the
// report carries the comparison, and each drain saw the broker accept its
// last record.
func TestWebhookSmoke(t *testing.T) {
	cfg := defaultConfig()
	cfg.DatabaseURL, cfg.Phases, cfg.Webhook = testenv.BaseDatabaseURL(), "drain,latency", true
	cfg.Records, cfg.Channels, cfg.Retained = 300, 10, 100
	cfg.Rate, cfg.LatencyDuration, cfg.LatencyProducers = 100, time.Second, 2
	report, progress := benchtest.Smoke(t, cfg.validate, func(ctx context.Context, out, progress io.Writer) error {
		return run(ctx, cfg, out, progress)
	})
	if n := strings.Count(progress, ", all accepted after "); n == 0 || strings.Contains(progress, ", all accepted after 0s)") {
		t.Errorf("progress has %d drains' acceptance of their last record, want some, none at 0s:\n%s", n, progress)
	}
	benchtest.ReportHas(t, report,
		"| drain alone, 300 records | ", "| drain with a webhook handler beside, 300 records | ",
		"| realtime drain rate | **", "| drain: PostgreSQL CPU per record and handler | **",
		"| realtime commit → broker accept p99 | **", "| steady rate: PostgreSQL CPU per record and handler | **",
		"| realtime commit → broker accept p99, records committed after the first 100ms | **",
	)
	if strings.Contains(report, "NaN") {
		t.Errorf("report has a missing number:\n%s", report)
	}
}

// A tiny -webhook latency run with the diagnosis flags: the webhook
// handler on a pool of its own, the active backends sampled; the progress
// splits realtime's commit → accept, lists what the backends did and when
// the slowest records were committed.
func TestWebhookDiagnosisSmoke(t *testing.T) {
	cfg := defaultConfig()
	cfg.DatabaseURL, cfg.Phases, cfg.Webhook = testenv.BaseDatabaseURL(), "latency", true
	cfg.Channels, cfg.Retained, cfg.WebhookPool, cfg.SampleWaits = 10, 100, "own", 10*time.Millisecond
	cfg.Rate, cfg.LatencyDuration, cfg.LatencyProducers = 200, time.Second, 2
	_, progress := benchtest.Smoke(t, cfg.validate, func(ctx context.Context, out, progress io.Writer) error {
		return run(ctx, cfg, out, progress)
	})
	for _, want := range []string{"latency with a webhook handler beside: commit → claimed p50 ", "latency alone: active backends, ",
		"the wake-up trigger armed in ", "slowest 2 records (≥ ", "realtime's calls by what was under way as they began: beside neither ",
		"; CPU pressure ", "its own pool's backends "} {
		if n := strings.Count(progress, want); n < 2 {
			t.Errorf("progress has %q %d times, want at least 2:\n%s", want, n, progress)
		}
	}
}

// A tiny -business producers run: each transaction inserts a business row
// and stages a record, with a Worker draining and with no consumer; run
// checks every commit left its business row, and the report names the
// business transaction.
func TestBusinessProducersSmoke(t *testing.T) {
	cfg := defaultConfig()
	cfg.DatabaseURL, cfg.Phases, cfg.Business = testenv.BaseDatabaseURL(), "producers", true
	cfg.Producers, cfg.ProducerDuration, cfg.ProducerVariants, cfg.Channels = 2, time.Second, "worker/on,none/on", 10
	report, _ := benchtest.Smoke(t, cfg.validate, func(ctx context.Context, out, progress io.Writer) error {
		return run(ctx, cfg, out, progress)
	})
	if n := strings.Count(report, "producers of a business transaction (a business row and the staged record)"); n != 2 {
		t.Errorf("report names the business transaction in %d rows, want 2:\n%s", n, report)
	}
	if !strings.Contains(report, "mean commit rate with a Worker draining / with no consumer") {
		t.Errorf("report lacks the ratio:\n%s", report)
	}
}
