package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/hostinfo"
)

// report collects what the phases measured.
type report struct {
	cfg       config
	loadStart string // /proc/loadavg when the run began
	server    string
	drain     *drainResult
	latency   *latencyResult
	producers []producerResult
}

// run creates the database, runs the phases cfg selects, prints the
// report to out (progress to progress) and drops the database.
func run(ctx context.Context, cfg config, out, progress io.Writer) (err error) {
	db, err := createDB(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Drop()) }()
	fmt.Fprintf(progress, "outboxbench: database %s\n", db.Name)

	store, err := db.openStore(ctx, true)
	if err != nil {
		return err
	}
	server, err := serverInfo(ctx, store.Pool())
	store.Close()
	if err != nil {
		return err
	}
	rep := report{cfg: cfg, server: server, loadStart: hostinfo.LoadAvg()}
	if cfg.phase("drain") {
		r, err := runDrain(ctx, db, cfg, progress)
		if err != nil {
			return err
		}
		rep.drain = &r
	}
	if cfg.phase("latency") {
		r, err := runLatency(ctx, db, cfg, progress)
		if err != nil {
			return err
		}
		rep.latency = &r
	}
	if cfg.phase("producers") {
		// On, off, off, on: each variant runs once first and once after the
		// other, so neither gains from running second (warm caches, a
		// settled table).
		for _, trigger := range []bool{true, false, false, true} {
			r, err := runProducers(ctx, db, cfg, trigger, progress)
			if err != nil {
				return err
			}
			rep.producers = append(rep.producers, r)
		}
	}
	rep.print(out)
	return nil
}

// print writes the report as markdown.
func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\n### Outbox benchmark, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "- machine: %s\n", hostinfo.Machine())
	fmt.Fprintf(w, "- server: %s\n", r.server)
	fmt.Fprintf(w, "- table: the latency and producer phases start with %d dispatched rows retained\n", r.cfg.Retained)
	fmt.Fprintf(w, "- load average (1/5/15 min) at start: %s, at end: %s\n", r.loadStart, hostinfo.LoadAvg())
	fmt.Fprintf(w, "- command: `%s`\n\n", commandLine())
	fmt.Fprintln(w, "| measurement | result | target / reference |")
	fmt.Fprintln(w, "|---|---|---|")
	if d := r.drain; d != nil {
		fmt.Fprintf(w, "| drain: %d records over %d channels, batch %d, claim → publish → complete | **%s** (%.2f s; all published after %.2f s) | ≥ 60,000/s; Centrifugo 54,000–61,000/s at batch 1,000 |\n",
			d.Records, r.cfg.Channels, d.BatchSize, perSecond(int64(d.Records), d.Drained), d.Drained.Seconds(), d.Published.Seconds())
		fmt.Fprintf(w, "| drain: CPU per record while draining, Herald (this process) / PostgreSQL server | %.1f µs / %.1f µs | — |\n",
			benchkit.PerRecordMicros(d.CPU.self, d.Records), benchkit.PerRecordMicros(d.CPU.postgres, d.Records))
		fmt.Fprintf(w, "| drain: bulk staging with COPY (setup, Worker stopped) | %s | — |\n", perSecond(int64(d.Records), d.Stage))
	}
	if l := r.latency; l != nil {
		wake := "NOTIFY wake-up"
		if !l.Notify {
			wake = fmt.Sprintf("no trigger, polling every %v", r.cfg.PollInterval)
		}
		achieved := "n/a"
		if l.Elapsed > 0 {
			achieved = fmt.Sprintf("%.0f/s", float64(l.Committed-1)/l.Elapsed.Seconds())
		}
		fmt.Fprintf(w, "| commit → broker accept, paced at %d/s (achieved %s, %d records, %s) p50 / p99 / p99.9 / max | **%s / %s / %s** / %s | p99 ≤ 3 ms; Centrifugo commit → client p99 2.0–2.7 ms |\n",
			l.Rate, achieved, l.Committed, wake, benchkit.MS(l.Accept.P50), benchkit.MS(l.Accept.P99), benchkit.MS(l.Accept.P999), benchkit.MS(l.Accept.Max))
		fmt.Fprintf(w, "| producers' COMMIT in the latency phase p50 / p99 (%d connections; pacer fell behind by up to %s; %d records accepted before their COMMIT returned, counted as 0) | %s / %s | — |\n",
			r.cfg.LatencyProducers, benchkit.MS(l.MaxLag), l.Early, benchkit.MS(l.Commit.P50), benchkit.MS(l.Commit.P99))
	}
	for _, p := range r.producers {
		ref := "Centrifugo without trigger: 3,000/s at 0.9 ms"
		if p.Trigger {
			ref = "Centrifugo per-row pg_notify: 2,300–3,000/s, commit 15–20 ms"
		}
		fmt.Fprintf(w, "| %d single-row producers, NOTIFY trigger %s: commits/s, COMMIT p50 / p99, transaction p50 / p99 | **%s**, %s / %s, %s / %s | %s |\n",
			r.cfg.Producers, benchkit.OnOff(p.Trigger), perSecond(int64(p.Commits), p.Elapsed),
			benchkit.MS(p.Commit.P50), benchkit.MS(p.Commit.P99), benchkit.MS(p.Tx.P50), benchkit.MS(p.Tx.P99), ref)
	}
	fmt.Fprintln(w)
}
