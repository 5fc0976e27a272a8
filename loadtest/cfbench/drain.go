package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// env is what the phases share: the configuration, the bench database and
// a temp dir for Centrifugo's configs and logs.
type env struct {
	cfg      config
	dbURL    string
	pool     *pgxpool.Pool // a few connections for setup and count(*) polls
	dir      string
	runs     int
	progress io.Writer
}

// start starts Centrifugo with p (the DSN filled in) under a fresh name.
func (e *env) start(label string, p cfParams) (*centrifugo, error) {
	e.runs++
	p.DSN = e.dbURL
	return startCentrifugo(e.cfg.Centrifugo, e.dir, fmt.Sprintf("%02d-%s", e.runs, label), p)
}

// drainResult is one drain measurement.
type drainResult struct {
	Variant string         `json:"variant"` // "prestaged" or "staged"
	Config  consumerConfig `json:"config"`
	Records int            `json:"records"`

	// Stage: prestaged, the setup INSERT (Centrifugo not running); staged,
	// first insert → last producer commit (Centrifugo consuming).
	Stage time.Duration `json:"-"`
	// FirstConsumed: prestaged only, Centrifugo start → count(*) first
	// seen below Records (its start-up plus its first batch).
	FirstConsumed time.Duration `json:"-"`
	// FirstRemaining is count(*) at FirstConsumed.
	FirstRemaining int64 `json:"first_remaining,omitempty"`
	// Drained: prestaged, Centrifugo start → count(*) = 0; staged, first
	// insert → count(*) = 0 after every producer committed.
	Drained       time.Duration `json:"-"`
	CentrifugoCPU time.Duration `json:"-"`
	PostgresCPU   time.Duration `json:"-"`
	ErrorLogLines int           `json:"centrifugo_error_log_lines"`

	StageS            float64 `json:"stage_s"`
	FirstConsumedS    float64 `json:"first_consumed_s,omitempty"`
	DrainedS          float64 `json:"drained_s"`
	RecordsPerS       float64 `json:"records_per_s"`
	SteadyPerS        float64 `json:"records_per_s_after_first_consumed,omitempty"`
	CentrifugoCPUS    float64 `json:"centrifugo_cpu_s"`
	PostgresCPUS      float64 `json:"postgres_cpu_s"`
	CentrifugoUSPerRc float64 `json:"centrifugo_cpu_us_per_record"`
	PostgresUSPerRc   float64 `json:"postgres_cpu_us_per_record"`
}

func (r *drainResult) finish() {
	r.StageS, r.FirstConsumedS, r.DrainedS = r.Stage.Seconds(), r.FirstConsumed.Seconds(), r.Drained.Seconds()
	r.RecordsPerS = rate(r.Records, r.Drained)
	if r.FirstConsumed > 0 {
		r.SteadyPerS = rate(int(r.FirstRemaining), r.Drained-r.FirstConsumed)
	}
	r.CentrifugoCPUS, r.PostgresCPUS = r.CentrifugoCPU.Seconds(), r.PostgresCPU.Seconds()
	r.CentrifugoUSPerRc, r.PostgresUSPerRc = benchkit.PerRecordMicros(r.CentrifugoCPU, r.Records), benchkit.PerRecordMicros(r.PostgresCPU, r.Records)
}

func (e *env) drainParams(cc consumerConfig) cfParams {
	return cfParams{Partitions: cc.Partitions, Batch: cc.Batch, PollInterval: e.cfg.PollInterval}
}

// runDrain stages cfg.Records with Centrifugo stopped, starts it, and
// times it from process start until SELECT count(*) returns 0 (polled
// every 50 ms).
func (e *env) runDrain(ctx context.Context, cc consumerConfig) (res drainResult, err error) {
	cfg := e.cfg
	res = drainResult{Variant: "prestaged", Config: cc, Records: cfg.Records}
	if err := recreateTable(ctx, e.pool, false); err != nil {
		return res, err
	}
	t := time.Now()
	if err := stageSQL(ctx, e.pool, cfg.Records, cfg.Channels, cc.Partitions); err != nil {
		return res, err
	}
	res.Stage = time.Since(t)
	fmt.Fprintf(e.progress, "drain %s: staged %d records in %v; starting Centrifugo\n", cc, cfg.Records, res.Stage.Round(time.Millisecond))

	pg0 := benchkit.ReadBackends(ctx, e.pool)
	cf, err := e.start("drain-"+cc.String(), e.drainParams(cc))
	if err != nil {
		return res, err
	}
	defer cf.stop()
	err = pollUntil(ctx, cfg.DrainTimeout, 50*time.Millisecond, func() (bool, error) {
		if err := cf.alive(); err != nil {
			return false, err
		}
		n, err := benchkit.CountRows(ctx, e.pool, outboxTable)
		if err != nil {
			return false, err
		}
		if n < int64(cfg.Records) && res.FirstConsumed == 0 {
			res.FirstConsumed, res.FirstRemaining = time.Since(cf.Started), n
		}
		if n == 0 {
			res.Drained = time.Since(cf.Started)
			return true, nil
		}
		return false, nil
	})
	res.CentrifugoCPU, res.PostgresCPU = cf.cpu(), benchkit.ReadBackends(ctx, e.pool).Since(pg0)
	if err := e.settle(ctx, cf, &res, "drain", cc, err); err != nil {
		return res, err
	}
	fmt.Fprintf(e.progress, "drain %s: %d records consumed in %v (%.0f/s); CPU per record: Centrifugo %.1f µs, PostgreSQL %.1f µs\n",
		cc, cfg.Records, res.Drained.Round(time.Millisecond), res.RecordsPerS, res.CentrifugoUSPerRc, res.PostgresUSPerRc)
	return res, nil
}

// runStaged starts Centrifugo on an empty table, waits until it consumes
// a warm-up row per partition, then has cfg.StagedProducers producers
// insert cfg.Records rows in transactions of cfg.StagedBatch (COPY), and
// times first insert → count(*) = 0 after the last commit.
func (e *env) runStaged(ctx context.Context, cc consumerConfig) (res drainResult, err error) {
	cfg := e.cfg
	res = drainResult{Variant: "staged", Config: cc, Records: cfg.Records}
	if err := recreateTable(ctx, e.pool, false); err != nil {
		return res, err
	}
	cf, err := e.start("staged-"+cc.String(), e.drainParams(cc))
	if err != nil {
		return res, err
	}
	defer cf.stop()
	if err := e.warmUp(ctx, cf, cc.Partitions); err != nil {
		return res, err
	}
	producers, err := openPool(ctx, e.dbURL, cfg.StagedProducers, "cfbench-staged")
	if err != nil {
		return res, err
	}
	defer producers.Close()
	fmt.Fprintf(e.progress, "staged %s: Centrifugo consuming; %d producers insert %d records, %d per transaction\n",
		cc, cfg.StagedProducers, cfg.Records, cfg.StagedBatch)

	cf0, pg0 := cf.cpu(), benchkit.ReadBackends(ctx, e.pool)
	start := time.Now()
	staging := benchkit.StartStaging(ctx, cfg.StagedProducers, cfg.Records, cfg.StagedBatch, func(ctx context.Context, from, to int) error {
		if err := copyRows(ctx, producers, from, to, cfg.Channels, cc.Partitions); err != nil {
			return fmt.Errorf("cfbench: staged insert: %w", err)
		}
		return nil
	})
	err = pollUntil(ctx, cfg.DrainTimeout, 50*time.Millisecond, func() (bool, error) {
		if err := cf.alive(); err != nil {
			return false, err
		}
		done := staging.Done() // before the count: a zero count then covers every row
		n, err := benchkit.CountRows(ctx, e.pool, outboxTable)
		if err != nil {
			return false, err
		}
		if err := staging.Err(); err != nil {
			return false, err
		}
		if done && n == 0 {
			res.Drained = time.Since(start)
			return true, nil
		}
		return false, nil
	})
	res.CentrifugoCPU, res.PostgresCPU = cf.cpu()-cf0, benchkit.ReadBackends(ctx, e.pool).Since(pg0)
	res.Stage = staging.Stop()
	if err := e.settle(ctx, cf, &res, "staged", cc, err); err != nil {
		return res, err
	}
	fmt.Fprintf(e.progress, "staged %s: %d records inserted in %v, all consumed after %v (%.0f/s); CPU per record: Centrifugo %.1f µs, PostgreSQL %.1f µs\n",
		cc, cfg.Records, res.Stage.Round(time.Millisecond), res.Drained.Round(time.Millisecond), res.RecordsPerS,
		res.CentrifugoUSPerRc, res.PostgresUSPerRc)
	return res, nil
}

// settle ends the drain or staged measurement of cc: waitErr, what
// waiting for the rows to be consumed returned, fails it; else every
// record must have been published, and res gets Centrifugo's error log
// lines and the rates.
func (e *env) settle(ctx context.Context, cf *centrifugo, res *drainResult, phase string, cc consumerConfig, waitErr error) error {
	if waitErr != nil {
		return fmt.Errorf("cfbench: %s %s: %w", phase, cc, waitErr)
	}
	if err := e.verifyPublished(ctx, cf, e.cfg.Records); err != nil {
		return err
	}
	res.ErrorLogLines = cf.ErrorLines()
	res.finish()
	return nil
}

// warmUp waits for /health, then inserts one row per partition (to the
// warm-up channel) and waits until the consumer has deleted them — so the
// consumer is known to run.
func (e *env) warmUp(ctx context.Context, cf *centrifugo, partitions int) error {
	if err := cf.waitHealthy(ctx, e.cfg.StartupTimeout); err != nil {
		return fmt.Errorf("cfbench: centrifugo /health: %w", err)
	}
	for p := range partitions {
		if err := insertOne(ctx, e.pool, []byte(`{"channel":"`+warmupChannel+`","data":{"warmup":true}}`), p); err != nil {
			return err
		}
	}
	if err := e.waitConsumed(ctx, cf, e.cfg.StartupTimeout); err != nil {
		return fmt.Errorf("cfbench: consumer did not take the warm-up rows: %w; log:\n%s", err, cf.logTail())
	}
	return nil
}

// waitConsumed waits up to timeout for cf to have consumed every row of
// the table (polled every 10 ms).
func (e *env) waitConsumed(ctx context.Context, cf *centrifugo, timeout time.Duration) error {
	return pollUntil(ctx, timeout, 10*time.Millisecond, func() (bool, error) {
		if err := cf.alive(); err != nil {
			return false, err
		}
		n, err := benchkit.CountRows(ctx, e.pool, outboxTable)
		return n == 0, err
	})
}

// verifyPublished checks that Centrifugo published (not just deleted)
// the records: the stream offset of bench:ch-0 must equal how many
// records went to it. (A malformed payload is deleted without a publish.)
func (e *env) verifyPublished(ctx context.Context, cf *centrifugo, records int) error {
	got, err := cf.historyOffset(ctx, "bench:ch-0")
	if err != nil {
		return err
	}
	if want := perChannel(records, e.cfg.Channels, 0); got != uint64(want) {
		return fmt.Errorf("cfbench: bench:ch-0 has %d publications, want %d; log:\n%s", got, want, cf.logTail())
	}
	return nil
}
