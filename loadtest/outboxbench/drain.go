package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// drainResult is the outcome of the drain phase.
type drainResult struct {
	Records   int
	BatchSize int
	Stage     time.Duration // bulk staging (COPY), Worker stopped
	Published time.Duration // Worker start → broker accepted every record
	Drained   time.Duration // Worker start → every record completed
	CPU       cpuSpent      // CPU used while draining: this process, PostgreSQL
}

// stageChunk is how many rows one COPY transaction stages.
const stageChunk = 20_000

// channelName is the name of channel i (reset builds the same names in SQL).
func channelName(i int) string { return "bench/c" + strconv.Itoa(i) }

// benchTenant owns every benchmark channel.
const benchTenant = "bench"

// runDrain stages cfg.Records with no Worker running, then starts one and
// measures how long claim → publish → complete takes for all of them.
func runDrain(ctx context.Context, db *benchDB, cfg config, progress io.Writer) (drainResult, error) {
	res := drainResult{Records: cfg.Records, BatchSize: cfg.BatchSize}
	store, err := db.openStore(ctx, true)
	if err != nil {
		return res, err
	}
	defer store.Close()
	if err := reset(ctx, store.Pool(), 0, cfg.Channels); err != nil {
		return res, err
	}
	start := time.Now()
	if err := stageBulk(ctx, store.Pool(), cfg.Records, cfg.Channels); err != nil {
		return res, err
	}
	if _, err := store.Pool().Exec(ctx, `ANALYZE herald.outbox`); err != nil {
		return res, fmt.Errorf("outboxbench: analyze: %w", err)
	}
	res.Stage = time.Since(start)
	fmt.Fprintf(progress, "drain: staged %d records over %d channels in %v; starting the Worker (batch %d)\n",
		cfg.Records, cfg.Channels, res.Stage.Round(time.Millisecond), cfg.BatchSize)

	p, err := startPipeline(ctx, store, cfg, false)
	if err != nil {
		return res, err
	}
	start = time.Now()
	cpu0 := readCPU(ctx, store.Pool())
	err = benchkit.PollUntil(ctx, 10*time.Minute, 2*time.Millisecond, nil, func() (bool, error) {
		if res.Published == 0 && p.pub.accepted.Load() >= int64(cfg.Records) {
			res.Published = time.Since(start)
		}
		n, err := p.completed()
		if err != nil || n < int64(cfg.Records) {
			return false, err
		}
		res.Drained = time.Since(start)
		return true, nil
	})
	res.CPU = readCPU(ctx, store.Pool()).since(cpu0)
	p.stop()
	if err != nil {
		return res, fmt.Errorf("outboxbench: drain: %w", err)
	}
	dispatched, other, err := countStates(ctx, store.Pool())
	if err != nil {
		return res, err
	}
	if dispatched != cfg.Records || other != 0 {
		return res, fmt.Errorf("outboxbench: drain: %d dispatched and %d other rows, want %d dispatched", dispatched, other, cfg.Records)
	}
	fmt.Fprintf(progress, "drain: %d records completed in %v (%s); CPU per record: Herald %.1f µs, PostgreSQL %.1f µs\n",
		cfg.Records, res.Drained.Round(time.Millisecond), perSecond(int64(cfg.Records), res.Drained),
		benchkit.PerRecordMicros(res.CPU.self, cfg.Records), benchkit.PerRecordMicros(res.CPU.postgres, cfg.Records))
	return res, nil
}

// stageBulk stages n records round-robin over channels with COPY, in
// transactions of stageChunk rows.
func stageBulk(ctx context.Context, pool *pgxpool.Pool, n, channels int) error {
	cols := []string{"tenant_id", "channel", "type", "schema_version", "payload"}
	for done := 0; done < n; {
		size := min(stageChunk, n-done)
		rows := make([][]any, size)
		for i := range rows {
			k := done + i
			rows[i] = []any{benchTenant, channelName(k % channels), "bench.record", 1,
				json.RawMessage(fmt.Sprintf(`{"n":%d,"note":"outbox benchmark record"}`, k))}
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"herald", "outbox"}, cols, pgx.CopyFromRows(rows))
			return err
		})
		if err != nil {
			return fmt.Errorf("outboxbench: stage: %w", err)
		}
		done += size
	}
	return nil
}
