package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// producerResult is one variant of the producer phase.
type producerResult struct {
	Trigger  bool          `json:"pg_notify_trigger"`
	Commits  int           `json:"commits"`
	Elapsed  time.Duration `json:"-"`
	Tx       quantiles     `json:"tx"`     // BEGIN → INSERT → COMMIT returned
	Commit   quantiles     `json:"commit"` // the COMMIT round trip alone
	ElapsedS float64       `json:"elapsed_s"`
	PerS     float64       `json:"commits_per_s"`
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
	txs := make([][]time.Duration, cfg.Producers)
	commits := make([][]time.Duration, cfg.Producers)
	errs := make([]error, cfg.Producers)
	runCtx, cancel := context.WithTimeout(ctx, cfg.ProducerDuration)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for w := range cfg.Producers {
		wg.Go(func() {
			for k := w; runCtx.Err() == nil; k += cfg.Producers {
				// Not bound to runCtx, so the last transaction completes.
				t0 := mono()
				m, err := produceOne(ctx, pool, k, cfg.Channels, 1)
				if err != nil {
					errs[w] = err
					return
				}
				txs[w] = append(txs[w], time.Duration(m.committedAt-t0))
				commits[w] = append(commits[w], m.commitTook)
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	var allTx, allCommit []time.Duration
	for w := range cfg.Producers {
		if errs[w] != nil {
			return res, errs[w]
		}
		allTx = append(allTx, txs[w]...)
		allCommit = append(allCommit, commits[w]...)
	}
	n, err := countRows(ctx, e.pool)
	if err != nil {
		return res, err
	}
	if n != int64(len(allTx)) {
		return res, fmt.Errorf("cfbench: producers: %d rows in the table after %d commits", n, len(allTx))
	}
	res.Commits = len(allTx)
	res.Tx, res.Commit = summarize(allTx), summarize(allCommit)
	res.ElapsedS, res.PerS = res.Elapsed.Seconds(), rate(res.Commits, res.Elapsed)
	fmt.Fprintf(e.progress, "producers (pg_notify trigger %s, no consumer): %d commits in %v (%.0f/s), commit p50 %s p99 %s\n",
		onOff(trigger), res.Commits, res.Elapsed.Round(time.Millisecond), res.PerS, ms(res.Commit.P50), ms(res.Commit.P99))
	return res, nil
}
