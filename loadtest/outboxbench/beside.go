package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// printBeside writes -webhook's comparison: each drain and latency run
// alone and beside a webhook handler, and the ratios of their means.
func (r *report) printBeside(w io.Writer) {
	fmt.Fprintf(w, "#### Realtime alone and with a webhook handler beside (alone, beside, beside, alone)\n\n")
	fmt.Fprintln(w, "| run | realtime | webhook handler | PostgreSQL CPU per record and handler | Herald CPU per record and handler |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	var drainRate, drainPG, latP99, latPG, settledP99 [2][]float64 // [alone, beside]
	for _, d := range r.drains {
		handlers, cpu, hook := 1, d.CPU, "—"
		if d.Beside {
			handlers, cpu = 2, d.CPUAll
			hook = fmt.Sprintf("%s (%.2f s)", perSecond(int64(d.Records), d.HookDrained), d.HookDrained.Seconds())
		}
		rate := float64(d.Records) / d.Drained.Seconds()
		pg := benchkit.PerRecordMicros(cpu.postgres, handlers*d.Records)
		i := index(d.Beside)
		drainRate[i], drainPG[i] = append(drainRate[i], rate), append(drainPG[i], pg)
		fmt.Fprintf(w, "| drain %s, %d records | %s (%.2f s) | %s | %.1f µs | %.1f µs |\n", besideText(d.Beside), d.Records,
			perSecond(int64(d.Records), d.Drained), d.Drained.Seconds(), hook, pg, benchkit.PerRecordMicros(cpu.self, handlers*d.Records))
	}
	for _, l := range r.latencies {
		handlers, hook := 1, "—"
		if l.Beside {
			handlers, hook = 2, "every record delivered"
		}
		pg := benchkit.PerRecordMicros(l.WorkerPG, handlers*l.Committed)
		i := index(l.Beside)
		latP99[i], latPG[i] = append(latP99[i], ms(l.Accept.P99)), append(latPG[i], pg)
		settledP99[i] = append(settledP99[i], ms(l.AfterStart.P99))
		fmt.Fprintf(w, "| %d/s, %d records, %s: commit → broker accept p50 / p99 | %s / **%s** | %s | %.1f µs (the Workers' own backends) | %.1f µs |\n",
			l.Rate, l.Committed, besideText(l.Beside), benchkit.MS(l.Accept.P50), benchkit.MS(l.Accept.P99), hook, pg,
			benchkit.PerRecordMicros(l.Self, handlers*l.Committed))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| beside ÷ alone (means) | ratio | target |")
	fmt.Fprintln(w, "|---|---|---|")
	if len(drainRate[0]) > 0 && len(drainRate[1]) > 0 {
		fmt.Fprintf(w, "| realtime drain rate | **%.2f×** (%.0f/s ÷ %.0f/s) | ≥ 1/1.2 = 0.83× |\n",
			benchkit.Mean(drainRate[1])/benchkit.Mean(drainRate[0]), benchkit.Mean(drainRate[1]), benchkit.Mean(drainRate[0]))
		fmt.Fprintf(w, "| drain: PostgreSQL CPU per record and handler | **%.2f×** (%.1f ÷ %.1f µs) | ≤ 1.2× |\n",
			benchkit.Mean(drainPG[1])/benchkit.Mean(drainPG[0]), benchkit.Mean(drainPG[1]), benchkit.Mean(drainPG[0]))
	}
	if len(latP99[0]) > 0 && len(latP99[1]) > 0 {
		fmt.Fprintf(w, "| realtime commit → broker accept p99 | **%.2f×** (%s ÷ %s ms) | ≤ 1.2× |\n",
			benchkit.Mean(latP99[1])/benchkit.Mean(latP99[0]), floats(latP99[1]), floats(latP99[0]))
		fmt.Fprintf(w, "| realtime commit → broker accept p99, records committed after the first %v | **%.2f×** (%s ÷ %s ms) | — |\n",
			r.latencies[0].Settle, benchkit.Mean(settledP99[1])/benchkit.Mean(settledP99[0]), floats(settledP99[1]), floats(settledP99[0]))
		fmt.Fprintf(w, "| steady rate: PostgreSQL CPU per record and handler | **%.2f×** (%.1f ÷ %.1f µs) | ≤ 1.2× |\n",
			benchkit.Mean(latPG[1])/benchkit.Mean(latPG[0]), benchkit.Mean(latPG[1]), benchkit.Mean(latPG[0]))
	}
	fmt.Fprintln(w)
}

// index is 1 beside, 0 alone.
func index(beside bool) int {
	if beside {
		return 1
	}
	return 0
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// floats lists v with two decimals, joined by " + " (the runs a mean is of).
func floats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return "mean of " + strings.Join(s, " + ")
}
