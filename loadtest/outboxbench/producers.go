package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/outboxfeed"
)

// producerResult is one variant of the producer phase.
type producerResult struct {
	Trigger bool // the NOTIFY wake-up trigger was installed
	Commits int
	Elapsed time.Duration
	Tx      benchkit.Quantiles // BEGIN → INSERT → COMMIT returned
	Commit  benchkit.Quantiles // the COMMIT round trip alone
	Drained int                // records the Worker dispatched during the run
}

// runProducers runs cfg.Producers concurrent producers, each committing
// one staged record per transaction as fast as it can for
// cfg.ProducerDuration, while a Worker dispatches — with the NOTIFY
// trigger installed or dropped.
func runProducers(ctx context.Context, db *benchDB, cfg config, trigger bool, progress io.Writer) (producerResult, error) {
	res := producerResult{Trigger: trigger}
	store, err := db.openStore(ctx, trigger)
	if err != nil {
		return res, err
	}
	defer store.Close()
	if err := reset(ctx, store.Pool(), cfg.Retained, cfg.Channels); err != nil {
		return res, err
	}
	p, err := startPipeline(ctx, store, cfg, false)
	if err != nil {
		return res, err
	}
	stopped := false
	defer func() {
		if !stopped {
			p.stop()
		}
	}()
	if err := p.waitReady(ctx); err != nil {
		return res, err
	}
	pool, err := db.openPool(ctx, cfg.Producers)
	if err != nil {
		return res, err
	}
	defer pool.Close()

	allTx, allCommit, elapsed, err := benchkit.Unpaced(ctx, cfg.Producers, cfg.ProducerDuration, func(w, k int) (time.Duration, time.Duration, error) {
		return produceOne(ctx, pool, w, k, cfg.Channels)
	})
	res.Elapsed = elapsed
	p.stop()
	stopped = true
	if err != nil {
		return res, err
	}
	res.Commits = len(allTx)
	res.Tx, res.Commit = benchkit.Summarize(allTx), benchkit.Summarize(allCommit)
	fmt.Fprintf(progress, "producers (trigger %v): %d commits in %v (%s), commit p50 %s p99 %s\n",
		benchkit.OnOff(trigger), res.Commits, res.Elapsed.Round(time.Millisecond), perSecond(int64(res.Commits), res.Elapsed),
		benchkit.MS(res.Commit.P50), benchkit.MS(res.Commit.P99))
	return res, nil
}

// produceOne stages one record in its own transaction (not bound to the
// run's deadline, so the last transaction completes) and times it.
func produceOne(ctx context.Context, pool *pgxpool.Pool, w, k, channels int) (txTook, commitTook time.Duration, err error) {
	n := outboxfeed.Notification{
		ID: uuid.NewString(), TenantID: benchTenant, Channel: channelName((w*7919 + k) % channels),
		Type: "bench.record", SchemaVersion: 1,
		Payload: json.RawMessage(fmt.Sprintf(`{"producer":%d,"n":%d}`, w, k)),
	}
	start := time.Now()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("outboxbench: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit
	if _, err := outboxfeed.Stage(ctx, tx, n); err != nil {
		return 0, 0, err
	}
	before := time.Now()
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("outboxbench: commit: %w", err)
	}
	end := time.Now()
	return end.Sub(start), end.Sub(before), nil
}
