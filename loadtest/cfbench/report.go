package main

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/hostinfo"
)

// report is what the phases measured; it is also the -json document.
type report struct {
	Time       string           `json:"time"`
	Machine    string           `json:"machine"`
	Server     string           `json:"server"`
	Centrifugo string           `json:"centrifugo"`
	Command    string           `json:"command"`
	LoadStart  string           `json:"load_start"`
	LoadEnd    string           `json:"load_end"`
	Records    int              `json:"records"`
	Channels   int              `json:"channels"`
	PollS      float64          `json:"drain_partition_poll_interval_s"`
	StagedBy   int              `json:"staged_producers"`
	StagedTx   int              `json:"staged_rows_per_tx"`
	ProdConns  int              `json:"producer_connections"`
	Drain      []drainResult    `json:"drain"`
	Latency    *latencyResult   `json:"latency,omitempty"`
	Producers  []producerResult `json:"producers"`
}

// run creates the database and the temp dir, runs the phases cfg
// selects, prints the report to out (progress to progress) and cleans up.
func run(ctx context.Context, cfg config, out, progress io.Writer) (err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.Timeout, fmt.Errorf("cfbench: -timeout %v reached", cfg.Timeout))
	defer cancel()
	rep := &report{Machine: hostinfo.Machine(), Command: commandLine(), LoadStart: hostinfo.LoadAvg(),
		Records: cfg.Records, Channels: cfg.Channels, PollS: cfg.PollInterval.Seconds(),
		StagedBy: cfg.StagedProducers, StagedTx: cfg.StagedBatch, ProdConns: cfg.Producers}
	needCF := cfg.phase("drain") || cfg.phase("staged") || cfg.phase("latency")
	if needCF {
		v, err := centrifugoVersion(ctx, cfg.Centrifugo)
		if err != nil {
			return err
		}
		rep.Centrifugo = v
		fmt.Fprintf(progress, "cfbench: %s\n", v)
	}
	dir, err := os.MkdirTemp("", "cfbench-")
	if err != nil {
		return err
	}
	defer func() {
		if cfg.KeepTemp || err != nil {
			fmt.Fprintf(progress, "cfbench: Centrifugo configs and logs kept in %s\n", dir)
			return
		}
		os.RemoveAll(dir)
	}()
	db, err := createDB(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Drop()) }()
	fmt.Fprintf(progress, "cfbench: database %s\n", db.Name)
	pool, err := openPool(ctx, db.URL, 2, "cfbench")
	if err != nil {
		return err
	}
	defer pool.Close()
	if rep.Server, err = benchkit.ServerInfo(ctx, pool); err != nil {
		return fmt.Errorf("cfbench: %w", err)
	}
	e := &env{cfg: cfg, dbURL: db.URL, pool: pool, dir: dir, progress: progress}

	// The drain and then the staged phase measure each consumer shape.
	consumerPhases := []struct {
		name    string
		measure func(context.Context, consumerConfig) (drainResult, error)
	}{{"drain", e.runDrain}, {"staged", e.runStaged}}
	for _, ph := range consumerPhases {
		if !cfg.phase(ph.name) {
			continue
		}
		for _, cc := range cfg.consumers {
			r, err := ph.measure(ctx, cc)
			if err != nil {
				return err
			}
			rep.Drain = append(rep.Drain, r)
		}
	}
	if cfg.phase("latency") {
		r, err := e.runLatency(ctx)
		if err != nil {
			return err
		}
		rep.Latency = &r
	}
	if cfg.phase("producers") {
		for _, v := range cfg.producerVariants() {
			r, err := e.runProducers(ctx, v)
			if err != nil {
				return err
			}
			rep.Producers = append(rep.Producers, r)
		}
	}
	rep.Time, rep.LoadEnd = time.Now().UTC().Format("2006-01-02 15:04 UTC"), hostinfo.LoadAvg()
	return rep.write(cfg.JSON, out)
}

// write prints the markdown report to out and the JSON document to path
// ("-": the JSON document to out instead of the markdown).
func (r *report) write(path string, out io.Writer) error {
	if path != "-" {
		r.print(out)
	}
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = out.Write(b)
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// print writes the report as markdown.
func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\n### Centrifugo PostgreSQL outbox consumer benchmark, %s\n\n", r.Time)
	fmt.Fprintf(w, "- machine: %s\n", r.Machine)
	fmt.Fprintf(w, "- server: %s\n", r.Server)
	if r.Centrifugo != "" {
		fmt.Fprintf(w, "- centrifugo: %s, memory engine, namespace `bench` with history (size 100, ttl 300s)\n", r.Centrifugo)
	}
	fmt.Fprintf(w, "- load average (1/5/15 min) at start: %s, at end: %s\n", r.LoadStart, r.LoadEnd)
	fmt.Fprintf(w, "- command: `%s`\n\n", r.Command)
	fmt.Fprintln(w, "| measurement | result | CPU Centrifugo / PostgreSQL (per record) |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, d := range r.Drain {
		what := fmt.Sprintf("drain, %s records staged before start, batch %s, %d partition(s), poll %v: Centrifugo start → count(*) = 0",
			thousands(float64(d.Records)), thousands(float64(d.Config.Batch)), d.Config.Partitions, time.Duration(r.PollS*float64(time.Second)))
		extra := fmt.Sprintf("first row consumed after %.2f s, %s/s from then; staging %.2f s",
			d.FirstConsumedS, thousands(d.SteadyPerS), d.StageS)
		if d.Variant == "staged" {
			what = fmt.Sprintf("drain while staging, Centrifugo running, %s records by %d producers in %s-row transactions, batch %s, %d partition(s): first insert → count(*) = 0",
				thousands(float64(d.Records)), r.StagedBy, thousands(float64(r.StagedTx)), thousands(float64(d.Config.Batch)), d.Config.Partitions)
			extra = fmt.Sprintf("inserts done after %.2f s", d.StageS)
		}
		fmt.Fprintf(w, "| %s | **%s/s** (%.2f s; %s) | %.2f s / %.2f s (%.1f µs / %.1f µs) |\n",
			what, thousands(d.RecordsPerS), d.DrainedS, extra, d.CentrifugoCPUS, d.PostgresCPUS, d.CentrifugoUSPerRc, d.PostgresUSPerRc)
	}
	if l := r.Latency; l != nil {
		wake := fmt.Sprintf("LISTEN/NOTIFY (per-row pg_notify trigger) + poll %v", time.Duration(l.PollS*float64(time.Second)))
		if !l.Notify {
			wake = fmt.Sprintf("polling every %v, no trigger", time.Duration(l.PollS*float64(time.Second)))
		}
		fmt.Fprintf(w, "| commit → WebSocket client, paced at %s/s by %d producers (achieved %.0f/s, %s records over %d channels; batch %d, %d partitions, %s) p50 / p99 / p99.9 / max | **%s / %s / %s** / %s | %.2f s / %.2f s over %.1f s (%.1f µs / %.1f µs) |\n",
			thousands(float64(l.Rate)), l.Producers, l.AchievedPerS, thousands(float64(l.Committed)), l.Channels, l.Batch, l.Partitions, wake,
			benchkit.MS(l.Latency.P50), benchkit.MS(l.Latency.P99), benchkit.MS(l.Latency.P999), benchkit.MS(l.Latency.Max),
			l.CentrifugoCPUS, l.PostgresCPUS, l.WindowS, l.CentrifugoUSPerRc, l.PostgresUSPerRc)
		fmt.Fprintf(w, "| latency phase: INSERT (embedded timestamp) → client p50 / p99; producers' COMMIT p50 / p99 (pacer fell behind by up to %s; %d received before their COMMIT returned, counted as 0; %d duplicates) | %s / %s; %s / %s | — |\n",
			benchkit.MS(time.Duration(l.MaxLagS*float64(time.Second))), l.Early, l.Duplicates,
			benchkit.MS(l.FromInsert.P50), benchkit.MS(l.FromInsert.P99), benchkit.MS(l.Commit.P50), benchkit.MS(l.Commit.P99))
	}
	for _, p := range r.Producers {
		what := "single-row producers"
		if p.Business {
			what = "producers of a business transaction (a business row and the outbox row)"
		}
		fmt.Fprintf(w, "| %d %s, %s: commits/s, COMMIT p50 / p99, transaction p50 / p99 | **%s/s**, %s / %s, %s / %s | — |\n",
			r.ProdConns, what, p.variant(), thousands(p.PerS),
			benchkit.MS(p.Commit.P50), benchkit.MS(p.Commit.P99), benchkit.MS(p.Tx.P50), benchkit.MS(p.Tx.P99))
	}
	r.printProducerRatio(w)
	fmt.Fprintln(w)
}

// centrifugoVersion runs `<bin> version` (which also checks the binary
// exists and runs) and reads the module version from the binary's build
// info: `go install` leaves the program's own version string at 0.0.0.
func centrifugoVersion(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("cfbench: %s version: %v: %s (build it with GOBIN=/tmp/cfbin go install github.com/centrifugal/centrifugo/v6@v6.9.1)", bin, err, strings.TrimSpace(string(out)))
	}
	v := "version unknown"
	if bi, err := buildinfo.ReadFile(bin); err == nil {
		v = bi.Main.Path + "@" + bi.Main.Version + ", " + bi.GoVersion
	}
	return fmt.Sprintf("%s (%s)", v, bin), nil
}

// printProducerRatio writes the producers' mean commit rate with
// Centrifugo consuming over that with no consumer and no trigger, when the
// run had both.
func (r *report) printProducerRatio(w io.Writer) {
	var with, without []float64
	for _, p := range r.Producers {
		switch v := p.variant(); {
		case v.Consumer:
			with = append(with, p.PerS)
		case !v.Trigger:
			without = append(without, p.PerS)
		}
	}
	if len(with) == 0 || len(without) == 0 {
		return
	}
	a, b := benchkit.Mean(with), benchkit.Mean(without)
	fmt.Fprintf(w, "| producers: mean commit rate with Centrifugo consuming / with no consumer and no trigger (%d and %d runs) | **%.3f** (%s/s / %s/s) | — |\n",
		len(with), len(without), a/b, thousands(a), thousands(b))
}
