package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/heraldgw/herald/internal/hookrecv"
	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/hostinfo"
)

// report collects what the phases measured.
type report struct {
	cfg       config
	loadStart string // /proc/loadavg when the run began
	server    string
	drain     *drainResult
	staged    *drainResult
	latency   *latencyResult
	producers []producerResult
	// With -webhook: every drain and latency run, alone and beside.
	drains    []drainResult
	latencies []latencyResult
}

// run creates the database, runs the phases cfg selects, prints the
// report to out (progress to progress) and drops the database.
func run(ctx context.Context, cfg config, out, progress io.Writer) (err error) {
	db, err := createDB(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	db.partitions = cfg.Partitions
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
	var recv *hookrecv.Receiver
	if cfg.Webhook {
		if recv, err = hookrecv.Start(); err != nil {
			return err
		}
		defer func() {
			_, rerr := recv.Stop()
			err = errors.Join(err, rerr)
		}()
		fmt.Fprintf(progress, "outboxbench: webhook receiver pid %d at %s\n", recv.Pid, recv.URL)
	}
	if cfg.phase("drain") {
		if rep.drains, err = eachHookVariant(ctx, db, cfg, recv, progress, runDrain); err != nil {
			return err
		}
		rep.drain = &rep.drains[0]
	}
	if cfg.phase("staged") {
		r, err := runStaged(ctx, db, cfg, progress)
		if err != nil {
			return err
		}
		rep.staged = &r
	}
	if cfg.phase("latency") {
		if rep.latencies, err = eachHookVariant(ctx, db, cfg, recv, progress, runLatency); err != nil {
			return err
		}
		rep.latency = &rep.latencies[0]
	}
	if cfg.phase("producers") {
		// By default ABBA (Worker, none, none, Worker): each variant runs
		// once first and once after the other, so neither gains from
		// running second (warm caches, a settled table).
		for _, v := range cfg.variants {
			r, err := runProducers(ctx, db, cfg, v, progress)
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
	fmt.Fprintf(w, "- table: drain and staged start empty; latency and producers start with %d dispatched rows retained\n", r.cfg.Retained)
	fmt.Fprintf(w, "- load average (1/5/15 min) at start: %s, at end: %s\n", r.loadStart, hostinfo.LoadAvg())
	fmt.Fprintf(w, "- command: `%s`\n\n", commandLine())
	fmt.Fprintln(w, "| measurement | result | target / reference |")
	fmt.Fprintln(w, "|---|---|---|")
	if d := r.drain; d != nil {
		fmt.Fprintf(w, "| drain: %d records over %d channels staged with the Worker stopped, batch %d, claim → publish (%s broker) → complete%s | **%s** (%.2f s; first claim with records after %.3f s, first record published after %.3f s, all after %.2f s) | measure Centrifugo with `go run ./loadtest/cfbench -phases drain` in the same run |\n",
			d.Records, r.cfg.Channels, d.BatchSize, d.Broker, holdText(d.HoldXmin), perSecond(int64(d.Records), d.Drained), d.Drained.Seconds(),
			d.FirstClaimed.Seconds(), d.FirstPublished.Seconds(), d.Published.Seconds())
		fmt.Fprintf(w, "| drain: CPU per record while draining, Herald (this process) / PostgreSQL backends of the bench database | %.1f µs / %.1f µs | — |\n",
			benchkit.PerRecordMicros(d.CPU.self, d.Records), benchkit.PerRecordMicros(d.CPU.postgres, d.Records))
		fmt.Fprintf(w, "| drain: bulk staging with COPY (setup, Worker stopped) | %s | — |\n", perSecond(int64(d.Records), d.Stage))
	}
	if d := r.staged; d != nil {
		fmt.Fprintf(w, "| staged: Worker running (batch %d, %s broker) while %d producers insert %d records over %d channels, %d per transaction (COPY)%s: first insert → every record completed | **%s** (%.2f s; inserts committed after %.2f s, all published after %.2f s) | measure Centrifugo with `go run ./loadtest/cfbench -phases staged` in the same run |\n",
			d.BatchSize, d.Broker, r.cfg.StagedProducers, d.Records, r.cfg.Channels, r.cfg.StagedBatch, holdText(d.HoldXmin),
			perSecond(int64(d.Records), d.Drained), d.Drained.Seconds(), d.Stage.Seconds(), d.Published.Seconds())
		fmt.Fprintf(w, "| staged: CPU per record, first insert → all completed, Herald (this process, producers included) / PostgreSQL backends of the bench database | %.1f µs / %.1f µs | — |\n",
			benchkit.PerRecordMicros(d.CPU.self, d.Records), benchkit.PerRecordMicros(d.CPU.postgres, d.Records))
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
		fmt.Fprintf(w, "| commit → broker accept (%s broker), paced at %d/s (achieved %s, %d records, %s) p50 / p99 / p99.9 / max | **%s / %s / %s** / %s | measure Centrifugo (commit → client) with `go run ./loadtest/cfbench -phases latency` in the same run |\n",
			l.Broker, l.Rate, achieved, l.Committed, wake, benchkit.MS(l.Accept.P50), benchkit.MS(l.Accept.P99), benchkit.MS(l.Accept.P999), benchkit.MS(l.Accept.Max))
		fmt.Fprintf(w, "| latency phase: CPU of the Worker's own PostgreSQL backends per record / of this process (Worker and producers) per record | %.1f µs / %.1f µs | — |\n",
			benchkit.PerRecordMicros(l.WorkerPG, l.Committed), benchkit.PerRecordMicros(l.Self, l.Committed))
		fmt.Fprintf(w, "| latency phase: CPU of every PostgreSQL backend of the database per record, the producers' included (compare `cfbench -phases latency`'s PostgreSQL CPU per record) | %.1f µs | — |\n",
			benchkit.PerRecordMicros(l.AllPG, l.Committed))
		fmt.Fprintf(w, "| latency phase: the Worker's claims with records / empty, per record | %.2f / %.2f | — |\n",
			float64(l.Claims)/float64(max(l.Committed, 1)), float64(l.EmptyClaims)/float64(max(l.Committed, 1)))
		fmt.Fprintf(w, "| producers' COMMIT in the latency phase p50 / p99 (%d connections; pacer fell behind by up to %s; %d records accepted before their COMMIT returned, counted as 0) | %s / %s | — |\n",
			r.cfg.LatencyProducers, benchkit.MS(l.MaxLag), l.Early, benchkit.MS(l.Commit.P50), benchkit.MS(l.Commit.P99))
	}
	var withWorker, without []float64
	for _, p := range r.producers {
		consumer := "no consumer (no Worker ran)"
		if p.Variant.Worker {
			consumer = fmt.Sprintf("a Worker draining (memory broker; completed %d records during the run)", p.Drained)
			withWorker = append(withWorker, p.rate())
		} else {
			without = append(without, p.rate())
		}
		what := "single-row producers"
		if r.cfg.Business {
			what = "producers of a business transaction (a business row and the staged record)"
		}
		fmt.Fprintf(w, "| %d %s, %s, NOTIFY trigger %s: commits/s, COMMIT p50 / p99, transaction p50 / p99 | **%s**, %s / %s, %s / %s | measure Centrifugo with `go run ./loadtest/cfbench -phases producers` in the same run |\n",
			r.cfg.Producers, what, consumer, benchkit.OnOff(p.Variant.Trigger), perSecond(int64(p.Commits), p.Elapsed),
			benchkit.MS(p.Commit.P50), benchkit.MS(p.Commit.P99), benchkit.MS(p.Tx.P50), benchkit.MS(p.Tx.P99))
	}
	if len(withWorker) > 0 && len(without) > 0 {
		a, b := benchkit.Mean(withWorker), benchkit.Mean(without)
		ratio := "n/a"
		if b > 0 {
			ratio = fmt.Sprintf("%.3f", a/b)
		}
		fmt.Fprintf(w, "| producers: mean commit rate with a Worker draining / with no consumer (%d and %d runs) | **%s** (%.0f/s / %.0f/s) | ≥ Centrifugo's in the same run (`cfbench -phases producers -producer-variants off,consumer,consumer,off`); aim ≥ 0.9 |\n",
			len(withWorker), len(without), ratio, a, b)
	}
	fmt.Fprintln(w)
	if r.cfg.Webhook {
		r.printBeside(w)
	}
}

// holdText describes -hold-xmin in a row.
func holdText(hold bool) string {
	if hold {
		return ", with a transaction holding the xmin horizon (opened before the records were staged)"
	}
	return ""
}
