package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/loadtest/internal/hookrecv"
)

func TestMain(m *testing.M) {
	hookrecv.MaybeServe() // the receiver process is this test binary
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// A tiny run: every variant delivers, the receiver answered every
// request, and the report carries the numbers and the ratios.
func TestSmoke(t *testing.T) {
	cfg := defaultConfig()
	cfg.DatabaseURL, cfg.Records, cfg.Rounds, cfg.Channels = testenv.BaseDatabaseURL(), 300, 2, 10
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	var out, progress bytes.Buffer
	if err := run(context.Background(), cfg, &out, &progress); err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	report := out.String()
	for _, want := range []string{"| floor | ", "| worker | ", "| endpoint | ", "| worker ÷ floor, same round | **", "| endpoint ÷ floor, same round | **"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if n := strings.Count(progress.String(), " records/s, CPU per record: Herald "); n != 6 {
		t.Errorf("%d measured runs, want 6:\n%s", n, progress.String())
	}
	if strings.Contains(report, "NaN") || strings.Contains(report, "Inf") {
		t.Errorf("report has a missing number:\n%s", report)
	}
}
