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
	Consumer bool               `json:"consumer"`
	Business bool               `json:"business_row"`
	Commits  int                `json:"commits"`
	Elapsed  time.Duration      `json:"-"`
	Tx       benchkit.Quantiles `json:"tx"`     // BEGIN → INSERT → COMMIT returned
	Commit   benchkit.Quantiles `json:"commit"` // the COMMIT round trip alone
	ElapsedS float64            `json:"elapsed_s"`
	PerS     float64            `json:"commits_per_s"`
}

// variant is the run's producerVariant.
func (r producerResult) variant() producerVariant {
	return producerVariant{Trigger: r.Trigger, Consumer: r.Consumer}
}

// runProducers runs cfg.Producers concurrent producers on a fresh outbox
// table, each committing one row per transaction (with cfg.Business, a
// business row and then the outbox row) as fast as it can for
// cfg.ProducerDuration: with no consumer, Centrifugo's documented per-row
// pg_notify trigger installed or not, or with Centrifugo consuming in the
// latency phase's shape (trigger, LISTEN, batch and partitions).
func (e *env) runProducers(ctx context.Context, v producerVariant) (producerResult, error) {
	cfg := e.cfg
	res := producerResult{Trigger: v.Trigger, Consumer: v.Consumer, Business: cfg.Business}
	if err := recreateTable(ctx, e.pool, v.Trigger); err != nil {
		return res, err
	}
	if cfg.Business {
		if err := benchkit.CreateBusinessTable(ctx, e.pool); err != nil {
			return res, fmt.Errorf("cfbench: %w", err)
		}
	}
	partitions := 1
	var cf *centrifugo
	if v.Consumer {
		partitions = cfg.LatencyPartitions
		var err error
		cf, err = e.start("producers", cfParams{Partitions: cfg.LatencyPartitions, Batch: cfg.LatencyBatch,
			PollInterval: cfg.LatencyPollInterval, Notify: true})
		if err != nil {
			return res, err
		}
		defer cf.stop()
		if err := e.warmUp(ctx, cf, partitions); err != nil {
			return res, err
		}
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
		m, err := produceOne(ctx, pool, w+i*cfg.Producers, cfg.Channels, partitions, cfg.Business)
		if err != nil {
			return 0, 0, err
		}
		return time.Duration(m.committedAt - t0), m.commitTook, nil
	})
	res.Elapsed = elapsed
	if err != nil {
		return res, err
	}
	if err := e.checkProduced(ctx, cf, int64(len(allTx))); err != nil {
		return res, err
	}
	res.Commits = len(allTx)
	res.Tx, res.Commit = benchkit.Summarize(allTx), benchkit.Summarize(allCommit)
	res.ElapsedS, res.PerS = res.Elapsed.Seconds(), rate(res.Commits, res.Elapsed)
	fmt.Fprintf(e.progress, "producers (%s, business row %s): %d commits in %v (%.0f/s), commit p50 %s p99 %s\n",
		v, benchkit.OnOff(cfg.Business), res.Commits, res.Elapsed.Round(time.Millisecond), res.PerS, benchkit.MS(res.Commit.P50), benchkit.MS(res.Commit.P99))
	return res, nil
}

// checkProduced checks that every one of the commits left its rows: the
// outbox rows in the table (no consumer) or consumed by cf (the table
// empties), and with -business as many business rows.
func (e *env) checkProduced(ctx context.Context, cf *centrifugo, commits int64) error {
	if cf != nil {
		if err := e.waitConsumed(ctx, cf, e.cfg.DrainTimeout); err != nil {
			return fmt.Errorf("cfbench: producers: Centrifugo did not consume every row: %w", err)
		}
	} else if n, err := benchkit.CountRows(ctx, e.pool, outboxTable); err != nil {
		return err
	} else if n != commits {
		return fmt.Errorf("cfbench: producers: %d rows in the table after %d commits", n, commits)
	}
	if !e.cfg.Business {
		return nil
	}
	n, err := benchkit.CountRows(ctx, e.pool, benchkit.BusinessTable)
	if err != nil {
		return fmt.Errorf("cfbench: %w", err)
	}
	if n != commits {
		return fmt.Errorf("cfbench: producers: %d business rows after %d commits", n, commits)
	}
	return nil
}
