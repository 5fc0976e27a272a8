package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/hostinfo"
)

// printReport writes the samples and the same-round ratios as markdown.
func printReport(w io.Writer, cfg config, server, loadStart string, samples []sample) {
	fmt.Fprintf(w, "\n### Webhook benchmark, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "- machine: %s\n", hostinfo.Machine())
	fmt.Fprintf(w, "- server: %s\n", server)
	fmt.Fprintf(w, "- %d records per variant per round over %d channels, %d in flight; receiver: a process of its own answering 204\n", cfg.Records, cfg.Channels, cfg.MaxInFlight)
	fmt.Fprintf(w, "- load average (1/5/15 min) at start: %s, at end: %s\n", loadStart, hostinfo.LoadAvg())
	fmt.Fprintf(w, "- command: `%s`\n\n", commandLine())

	fmt.Fprintln(w, "| variant | records/s per round | median | Herald CPU per record (median) | PostgreSQL CPU per record (median) | receiver CPU per record (median) | records delivered again |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, v := range cfg.variants() {
		var rates, self, pg, recv []float64
		repeats := 0
		for _, s := range samples {
			if s.Variant == v {
				repeats += s.Repeats
				rates = append(rates, s.rate())
				self = append(self, benchkit.PerRecordMicros(s.Self, s.Records))
				pg = append(pg, benchkit.PerRecordMicros(s.Postgres, s.Records))
				recv = append(recv, benchkit.PerRecordMicros(s.Receiver, s.Records))
			}
		}
		list := ""
		for i, r := range rates {
			if i > 0 {
				list += ", "
			}
			list += fmt.Sprintf("%.0f", r)
		}
		pgText := "—"
		if v == "worker" {
			pgText = fmt.Sprintf("%.1f µs", median(pg))
		}
		fmt.Fprintf(w, "| %s | %s | **%.0f/s** | %.1f µs | %s | %.1f µs | %d |\n", v, list, median(rates), median(self), pgText, median(recv), repeats)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| comparison | records/s | Herald CPU per record |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, v := range []string{"worker", "endpoint"} {
		rate, cpu := roundRatios(samples, v, "floor", cfg.Rounds)
		if len(rate) == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s ÷ floor, same round | **%.2f×** median (%.2f–%.2f over %d rounds) | %.2f× median (%.2f–%.2f) |\n",
			v, median(rate), slices.Min(rate), slices.Max(rate), len(rate), median(cpu), slices.Min(cpu), slices.Max(cpu))
	}
	fmt.Fprintln(w)
}

// roundRatios is a's records/s and CPU per record over b's, per round in
// which both ran.
func roundRatios(samples []sample, a, b string, rounds int) (rate, cpu []float64) {
	for r := range rounds {
		var sa, sb *sample
		for i := range samples {
			switch s := &samples[i]; {
			case s.Round == r && s.Variant == a:
				sa = s
			case s.Round == r && s.Variant == b:
				sb = s
			}
		}
		if sa == nil || sb == nil || sb.Self == 0 {
			continue
		}
		rate = append(rate, sa.rate()/sb.rate())
		cpu = append(cpu, (float64(sa.Self)/float64(sa.Records))/(float64(sb.Self)/float64(sb.Records)))
	}
	return rate, cpu
}

// median of v (0 when empty).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
