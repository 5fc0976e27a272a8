package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// producerResult is one variant of the producer phase.
type producerResult struct {
	Variant producerVariant
	Commits int
	Elapsed time.Duration
	Tx      benchkit.Quantiles // BEGIN → INSERT → COMMIT returned
	Commit  benchkit.Quantiles // the COMMIT round trip alone
	Drained int64              // records the Worker completed during the run (with a Worker)
}

// rate is the variant's commits per second.
func (r producerResult) rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Commits) / r.Elapsed.Seconds()
}

// runProducers runs cfg.Producers concurrent producers, each committing
// one staged record per transaction as fast as it can for
// cfg.ProducerDuration, with the NOTIFY trigger installed or dropped, and
// either a Worker dispatching (memory broker) or no consumer at all.
func runProducers(ctx context.Context, db *benchDB, cfg config, v producerVariant, progress io.Writer) (producerResult, error) {
	res := producerResult{Variant: v}
	store, err := db.openReset(ctx, v.Trigger, cfg.Retained, cfg.Channels)
	if err != nil {
		return res, err
	}
	defer store.Close()
	if cfg.Business {
		if err := benchkit.CreateBusinessTable(ctx, store.Pool()); err != nil {
			return res, fmt.Errorf("outboxbench: %w", err)
		}
	}
	// With a Worker draining, the producers' pool is its pipeline's.
	var p *pipeline
	var pool *pgxpool.Pool
	if v.Worker {
		if p, err = db.startProducing(ctx, store, cfg, "memory", false, nil, cfg.Producers); err != nil {
			return res, err
		}
		defer p.stop()
		pool = p.producers
	} else {
		if pool, err = db.openPool(ctx, cfg.Producers); err != nil {
			return res, err
		}
		defer pool.Close()
	}

	allTx, allCommit, elapsed, err := benchkit.Unpaced(ctx, cfg.Producers, cfg.ProducerDuration, func(w, k int) (time.Duration, time.Duration, error) {
		return produceOne(ctx, pool, w, k, cfg.Channels, cfg.Business)
	})
	res.Elapsed = elapsed
	if p != nil {
		res.Drained, _ = p.completed()
		p.stop()
	}
	if err != nil {
		return res, err
	}
	res.Commits = len(allTx)
	if cfg.Business {
		// Every business row committed with its record, none without.
		n, err := benchkit.CountRows(ctx, store.Pool(), benchkit.BusinessTable)
		if err != nil {
			return res, fmt.Errorf("outboxbench: %w", err)
		}
		if n != int64(res.Commits) {
			return res, fmt.Errorf("outboxbench: producers: %d business rows after %d commits", n, res.Commits)
		}
	}
	res.Tx, res.Commit = benchkit.Summarize(allTx), benchkit.Summarize(allCommit)
	fmt.Fprintf(progress, "producers (%s): %d commits in %v (%s), commit p50 %s p99 %s\n",
		v, res.Commits, res.Elapsed.Round(time.Millisecond), perSecond(int64(res.Commits), res.Elapsed),
		benchkit.MS(res.Commit.P50), benchkit.MS(res.Commit.P99))
	return res, nil
}

// produceOne stages one record in its own transaction (with business, a
// business row first; not bound to the run's deadline, so the last
// transaction completes) and times it.
func produceOne(ctx context.Context, pool *pgxpool.Pool, w, k, channels int, business bool) (txTook, commitTook time.Duration, err error) {
	n := stage.Notification{
		// No ID: Stage makes a time-ordered one (stage.NewID), as a
		// producer should, so the id index grows at its end the way
		// Centrifugo's bigserial does.
		TenantID: benchTenant, Channel: channelName((w*7919 + k) % channels),
		Type: "bench.record", SchemaVersion: 1,
		Payload: json.RawMessage(fmt.Sprintf(`{"producer":%d,"n":%d}`, w, k)),
	}
	start := time.Now()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("outboxbench: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit
	if business {
		if err := benchkit.InsertBusiness(ctx, tx, k); err != nil {
			return 0, 0, fmt.Errorf("outboxbench: %w", err)
		}
	}
	if _, err := stage.Stage(ctx, tx, n); err != nil {
		return 0, 0, err
	}
	before := time.Now()
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("outboxbench: commit: %w", err)
	}
	end := time.Now()
	return end.Sub(start), end.Sub(before), nil
}
