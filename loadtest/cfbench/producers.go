package main

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// producerResult is one variant of the producer phase.
type producerResult struct {
	Trigger  bool               `json:"pg_notify_trigger"`
	Commits  int                `json:"commits"`
	Elapsed  time.Duration      `json:"-"`
	Tx       benchkit.Quantiles `json:"tx"`     // BEGIN → INSERT → COMMIT returned
	Commit   benchkit.Quantiles `json:"commit"` // the COMMIT round trip alone
	ElapsedS float64            `json:"elapsed_s"`
	PerS     float64            `json:"commits_per_s"`
}

// runProducers runs cfg.Producers concurrent producers on a fresh outbox
// table with no consumer at all, each committing one row per transaction
// as fast as it can for cfg.ProducerDuration — with Centrifugo's
// documented per-row pg_notify trigger installed or not.
func (e *env) runProducers(ctx context.Context, trigger bool) (producerResult, error) {
	cfg := e.cfg
	res := producerResult{Trigger: trigger}
	if err := recreateTable(ctx, e.pool, trigger); err != nil {
		return res, err
	}
	pool, err := openPool(ctx, e.dbURL, cfg.Producers, "cfbench-producer")
	if err != nil {
		return res, err
	}
	defer pool.Close()
	allTx, allCommit, elapsed, err := benchkit.Unpaced(ctx, cfg.Producers, cfg.ProducerDuration, func(w, i int) (time.Duration, time.Duration, error) {
		// Producer w inserts records w, w+Producers, w+2·Producers, …, each
		// bound to ctx, not to the run's deadline, so the last one completes.
		t0 := mono()
		m, err := produceOne(ctx, pool, w+i*cfg.Producers, cfg.Channels, 1)
		if err != nil {
			return 0, 0, err
		}
		return time.Duration(m.committedAt - t0), m.commitTook, nil
	})
	res.Elapsed = elapsed
	if err != nil {
		return res, err
	}
	n, err := countRows(ctx, e.pool)
	if err != nil {
		return res, err
	}
	if n != int64(len(allTx)) {
		return res, fmt.Errorf("cfbench: producers: %d rows in the table after %d commits", n, len(allTx))
	}
	res.Commits = len(allTx)
	res.Tx, res.Commit = benchkit.Summarize(allTx), benchkit.Summarize(allCommit)
	res.ElapsedS, res.PerS = res.Elapsed.Seconds(), rate(res.Commits, res.Elapsed)
	fmt.Fprintf(e.progress, "producers (pg_notify trigger %s, no consumer): %d commits in %v (%.0f/s), commit p50 %s p99 %s\n",
		benchkit.OnOff(trigger), res.Commits, res.Elapsed.Round(time.Millisecond), res.PerS, benchkit.MS(res.Commit.P50), benchkit.MS(res.Commit.P99))
	return res, nil
}
