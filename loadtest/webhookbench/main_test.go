package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/heraldgw/herald/internal/hookrecv"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/loadtest/internal/benchtest"
)

func TestMain(m *testing.M) {
	hookrecv.MaybeServe() // the receiver process is this test binary
	goleak.VerifyTestMain(m)
}

// A tiny run: every variant delivers, the receiver answered every
// request, and the report carries the numbers and the ratios.
func TestSmoke(t *testing.T) {
	cfg := defaultConfig()
	cfg.DatabaseURL, cfg.Records, cfg.Rounds, cfg.Channels = testenv.BaseDatabaseURL(), 300, 2, 10
	report, progress := benchtest.Smoke(t, cfg.validate, func(ctx context.Context, out, progress io.Writer) error {
		return run(ctx, cfg, out, progress)
	})
	benchtest.ReportHas(t, report, "| floor | ", "| worker | ", "| endpoint | ", "| worker ÷ floor, same round | **", "| endpoint ÷ floor, same round | **")
	if n := strings.Count(progress, " records/s, CPU per record: Herald "); n != 6 {
		t.Errorf("%d measured runs, want 6:\n%s", n, progress)
	}
	if strings.Contains(report, "NaN") || strings.Contains(report, "Inf") {
		t.Errorf("report has a missing number:\n%s", report)
	}
}
