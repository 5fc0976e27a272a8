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

	"github.com/heraldgw/herald/internal/hookrecv"
	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// drainResult is the outcome of the drain or the staged phase.
type drainResult struct {
	Staged    bool   // the staged phase: records inserted while the Worker runs
	Broker    string // memory or redis
	HoldXmin  bool   // a transaction held the xmin horizon throughout
	Records   int
	BatchSize int
	// Stage: drain, bulk staging (COPY) with the Worker stopped; staged,
	// first insert → last producer commit (the Worker running).
	Stage time.Duration
	// Published: drain, Worker start → broker accepted every record;
	// staged, first insert → the same.
	Published time.Duration
	// FirstClaimed: drain, Worker start → the first claim that found
	// records returned (as the poll of the Worker's metrics sees it, every
	// 2 ms); FirstPublished: Worker start → the broker accepted the first
	// record.
	FirstClaimed, FirstPublished time.Duration
	// Drained: drain, Worker start → every record completed; staged,
	// first insert → every record completed (after every commit).
	Drained time.Duration
	CPU     cpuSpent // CPU used while draining: this process, PostgreSQL
	// Beside: a webhook handler drained the same records beside the
	// realtime Worker (-webhook); HookDrained is Worker start → every
	// record completed for it, and CPUAll the CPU used until both were
	// done (alone: CPU).
	Beside      bool
	HookDrained time.Duration
	CPUAll      cpuSpent
	// HookAtDrained is how many records the webhook handler had delivered
	// when realtime was done, and HookYields how many times its lanes
	// waited for realtime's backlog (-webhook-yield).
	HookAtDrained, HookYields int64
}

// stageChunk is how many rows one COPY transaction of the drain phase
// stages.
const stageChunk = 20_000

// drainTimeout bounds one drain or staged measurement.
const drainTimeout = 10 * time.Minute

// channelName is the name of channel i (reset builds the same names in SQL).
func channelName(i int) string { return "bench/c" + strconv.Itoa(i) }

// benchTenant owns every benchmark channel.
const benchTenant = "bench"

// runDrain stages cfg.Records with no Worker running, then starts one and
// measures how long claim → publish → complete takes for all of them.
//
// With recv, a webhook handler delivering to it is registered before the
// records are staged, and its Worker starts with the realtime one; the
// phase ends when both are done.
func runDrain(ctx context.Context, db *benchDB, cfg config, recv *hookrecv.Receiver, progress io.Writer) (res drainResult, err error) {
	res = drainResult{Broker: cfg.Broker, HoldXmin: cfg.HoldXmin, Records: cfg.Records, BatchSize: cfg.BatchSize, Beside: recv != nil}
	store, hook, err := openBeside(ctx, db, cfg, recv, true, 0, false, nil)
	if err != nil {
		return res, err
	}
	defer store.Close()
	defer hook.stop(ctx, &err, func(ctx context.Context) error { return hook.checkRecords(ctx, cfg.Records) })
	holder, err := maybeHoldXmin(ctx, db, cfg, "drain", progress)
	if err != nil {
		return res, err
	}
	defer holder.release()
	start := time.Now()
	if err := stageBulk(ctx, store.Pool(), cfg.Records, cfg.Channels); err != nil {
		return res, err
	}
	if _, err := store.Pool().Exec(ctx, `ANALYZE herald.outbox`); err != nil {
		return res, fmt.Errorf("outboxbench: analyze: %w", err)
	}
	res.Stage = time.Since(start)
	fmt.Fprintf(progress, "drain: staged %d records over %d channels in %v; starting the Worker (batch %d, %s broker)\n",
		cfg.Records, cfg.Channels, res.Stage.Round(time.Millisecond), cfg.BatchSize, cfg.Broker)

	p, err := startPipeline(ctx, store, cfg, cfg.Broker, false, hook.precedence())
	if err != nil {
		return res, err
	}
	if hook != nil {
		if err := hook.start(ctx); err != nil {
			p.stop()
			return res, err
		}
	}
	start = time.Now()
	cpu0 := readCPU(ctx, store.Pool())
	err = benchkit.PollUntil(ctx, drainTimeout, 2*time.Millisecond, nil, func() (bool, error) {
		p.markPublished(&res.Published, start, cfg.Records)
		if res.FirstClaimed == 0 {
			if n, _, err := p.claims(); err != nil || n > 0 {
				res.FirstClaimed = time.Since(start)
			}
		}
		if res.Drained == 0 {
			n, err := p.completed()
			if err != nil || n < int64(cfg.Records) {
				return false, err
			}
			res.Drained = time.Since(start)
			p.markPublished(&res.Published, start, cfg.Records)
			res.CPU = readCPU(ctx, store.Pool()).since(cpu0)
			if hook != nil {
				res.HookAtDrained = hook.counter.Distinct()
			}
		}
		done, err := hook.done(int64(cfg.Records))
		if err != nil || !done {
			return false, err
		}
		res.HookDrained = time.Since(start)
		if p := hook.precedence(); p != nil {
			res.HookYields = p.Yields()
		}
		res.CPUAll = readCPU(ctx, store.Pool()).since(cpu0)
		return true, nil
	})
	if err = p.finish(ctx, store.Pool(), "drain", cfg.Records, err); err != nil {
		return res, err
	}
	res.FirstPublished = p.pub.firstSince(start)
	fmt.Fprintf(progress, "drain %s: %d records completed in %v (%s; first claim with records seen after %v, first record accepted after %v, all accepted after %v); CPU per record: Herald %.1f µs, PostgreSQL %.1f µs\n",
		besideText(res.Beside), cfg.Records, res.Drained.Round(time.Millisecond), perSecond(int64(cfg.Records), res.Drained),
		res.FirstClaimed.Round(time.Millisecond), res.FirstPublished.Round(time.Millisecond), res.Published.Round(time.Millisecond),
		benchkit.PerRecordMicros(res.CPU.self, cfg.Records), benchkit.PerRecordMicros(res.CPU.postgres, cfg.Records))
	if res.Beside {
		fmt.Fprintf(progress, "drain: the webhook handler completed them in %v (%s), %d of them by the time realtime was done, yielding %d times; until both were done, CPU per record and handler: Herald %.1f µs, PostgreSQL %.1f µs\n",
			res.HookDrained.Round(time.Millisecond), perSecond(int64(cfg.Records), res.HookDrained), res.HookAtDrained, res.HookYields,
			benchkit.PerRecordMicros(res.CPUAll.self, 2*cfg.Records), benchkit.PerRecordMicros(res.CPUAll.postgres, 2*cfg.Records))
	}
	return res, nil
}

// runStaged starts the Worker on an empty table, waits until it reached
// the store, then has cfg.StagedProducers producers insert cfg.Records
// rows in transactions of cfg.StagedBatch (COPY), claiming chunks from a
// shared counter, and times first insert → every record completed after
// the last commit — as cfbench's staged phase does for Centrifugo.
func runStaged(ctx context.Context, db *benchDB, cfg config, progress io.Writer) (res drainResult, err error) {
	res = drainResult{Staged: true, Broker: cfg.Broker, HoldXmin: cfg.HoldXmin, Records: cfg.Records, BatchSize: cfg.BatchSize}
	store, err := db.openReset(ctx, true, 0, cfg.Channels)
	if err != nil {
		return res, err
	}
	defer store.Close()
	holder, err := maybeHoldXmin(ctx, db, cfg, "staged", progress)
	if err != nil {
		return res, err
	}
	defer holder.release()
	p, err := db.startProducing(ctx, store, cfg, cfg.Broker, false, nil, cfg.StagedProducers)
	if err != nil {
		return res, err
	}
	defer p.stop()
	fmt.Fprintf(progress, "staged: Worker running (batch %d, %s broker); %d producers insert %d records, %d per transaction\n",
		cfg.BatchSize, cfg.Broker, cfg.StagedProducers, cfg.Records, cfg.StagedBatch)

	cpu0 := readCPU(ctx, store.Pool())
	start := time.Now()
	staging := benchkit.StartStaging(ctx, cfg.StagedProducers, cfg.Records, cfg.StagedBatch, func(ctx context.Context, from, to int) error {
		if err := copyRange(ctx, p.producers, from, to, cfg.Channels); err != nil {
			return fmt.Errorf("outboxbench: staged insert: %w", err)
		}
		return nil
	})
	err = benchkit.PollUntil(ctx, drainTimeout, 2*time.Millisecond, nil, func() (bool, error) {
		done := staging.Done() // before the count: a full count then covers every commit
		p.markPublished(&res.Published, start, cfg.Records)
		n, err := p.completed()
		if err != nil {
			return false, err
		}
		if err := staging.Err(); err != nil {
			return false, err
		}
		if done && n >= int64(cfg.Records) {
			res.Drained = time.Since(start)
			p.markPublished(&res.Published, start, cfg.Records)
			return true, nil
		}
		return false, nil
	})
	res.CPU = readCPU(ctx, store.Pool()).since(cpu0)
	res.Stage = staging.Stop()
	if err = p.finish(ctx, store.Pool(), "staged", cfg.Records, err); err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "staged: %d records inserted in %v, all completed after %v (%s); CPU per record: Herald %.1f µs, PostgreSQL %.1f µs\n",
		cfg.Records, res.Stage.Round(time.Millisecond), res.Drained.Round(time.Millisecond), perSecond(int64(cfg.Records), res.Drained),
		benchkit.PerRecordMicros(res.CPU.self, cfg.Records), benchkit.PerRecordMicros(res.CPU.postgres, cfg.Records))
	return res, nil
}

// checkDispatched checks that handler has exactly records rows, all
// dispatched.
func checkDispatched(ctx context.Context, pool *pgxpool.Pool, handler, phase string, records int) error {
	dispatched, other, err := countStates(ctx, pool, handler)
	if err != nil {
		return err
	}
	if dispatched != records || other != 0 {
		var states []string
		rows, _ := pool.Query(ctx, `SELECT state || ' ' || count(*) FROM herald.outbox_records WHERE handler = $1 GROUP BY state`, handler)
		if rows != nil {
			states, _ = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		var parts []string
		rows, _ = pool.Query(ctx, `SELECT format('part %s %s open=%s expires in %s owner=%s pos_seq=%s', part, state, open, expires_at - now(), owner, pos_seq)
			FROM herald.outbox_partition WHERE handler = $1 ORDER BY part`, handler)
		if rows != nil {
			parts, _ = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		return fmt.Errorf("outboxbench: %s: %s: %d dispatched and %d other rows (%v; partitions %v), want %d dispatched", phase, handler, dispatched, other, states, parts, records)
	}
	return nil
}

// stageBulk stages n records round-robin over channels with COPY, in
// transactions of stageChunk rows.
func stageBulk(ctx context.Context, pool *pgxpool.Pool, n, channels int) error {
	for done := 0; done < n; {
		size := min(stageChunk, n-done)
		if err := copyRange(ctx, pool, done, done+size, channels); err != nil {
			return fmt.Errorf("outboxbench: stage: %w", err)
		}
		done += size
	}
	return nil
}

// copyRange stages records from … to−1 (record k on channel k mod
// channels) in one transaction, with COPY.
func copyRange(ctx context.Context, pool *pgxpool.Pool, from, to, channels int) error {
	cols := []string{"tenant_id", "channel", "type", "schema_version", "payload"}
	rows := make([][]any, to-from)
	for i := range rows {
		k := from + i
		rows[i] = []any{benchTenant, channelName(k % channels), "bench.record", 1,
			json.RawMessage(fmt.Sprintf(`{"n":%d,"note":"outbox benchmark record"}`, k))}
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"herald", "outbox"}, cols, pgx.CopyFromRows(rows))
		return err
	})
}

// xminHolder is an open transaction that took an xid, on a connection of
// its own: while it stays open the xmin horizon cannot pass it.
type xminHolder struct {
	conn *pgx.Conn
	tx   pgx.Tx
	xid  string
}

// maybeHoldXmin opens an xminHolder when cfg.HoldXmin is set; nil (whose
// release does nothing) otherwise.
func maybeHoldXmin(ctx context.Context, db *benchDB, cfg config, phase string, progress io.Writer) (*xminHolder, error) {
	if !cfg.HoldXmin {
		return nil, nil
	}
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		return nil, fmt.Errorf("outboxbench: hold xmin: %w", err)
	}
	cc.RuntimeParams["application_name"] = "outboxbench-xmin"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("outboxbench: hold xmin: %w", err)
	}
	h := &xminHolder{conn: conn}
	if h.tx, err = conn.Begin(ctx); err == nil {
		err = h.tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&h.xid)
	}
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("outboxbench: hold xmin: %w", err)
	}
	fmt.Fprintf(progress, "%s: transaction with xid %s holds the xmin horizon until the phase ends\n", phase, h.xid)
	return h, nil
}

// release rolls the transaction back and closes its connection.
func (h *xminHolder) release() {
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = h.tx.Rollback(ctx)
	_ = h.conn.Close(ctx)
}
