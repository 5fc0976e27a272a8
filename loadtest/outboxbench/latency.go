package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/internal/hookrecv"
	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// latencySettle is the start of a latency run of cfg that AfterStart
// leaves out: a tenth of the run, at most a second.
func latencySettle(cfg config) time.Duration { return min(time.Second, cfg.LatencyDuration/10) }

// latencyResult is the outcome of the latency phase.
type latencyResult struct {
	Rate      int                // target records/s
	Broker    string             // memory or redis
	Notify    bool               // the NOTIFY trigger was installed
	Committed int                // records committed
	Elapsed   time.Duration      // first to last commit
	MaxLag    time.Duration      // how far the pacer fell behind its schedule
	Commit    benchkit.Quantiles // COMMIT round trip of the producers
	Accept    benchkit.Quantiles // COMMIT returned → broker accepted
	// AfterStart is Accept of the records committed after the first
	// Settle of the run (latencySettle), once the Workers' first queries
	// and the pools' new connections are behind them.
	AfterStart benchkit.Quantiles
	Settle     time.Duration
	Early      int // accepted before the producer saw its COMMIT return (counted as 0)
	// WorkerPG is the CPU the Worker's own PostgreSQL backends
	// (application_name herald) spent from the first commit until every
	// record was accepted; AllPG every backend of the benchmark's
	// database in the same span, the producers' included (as cfbench's
	// latency phase reads Centrifugo's database); Self is this process's
	// (Worker and producers).
	WorkerPG, AllPG, Self time.Duration
	// Claims and EmptyClaims are the Worker's claims with records and
	// without, in the same span; HookClaims and HookEmptyClaims the
	// webhook handler's Worker's (beside).
	Claims, EmptyClaims         int64
	HookClaims, HookEmptyClaims int64
	// Beside: a webhook handler drained the same records beside the
	// realtime Worker (-webhook); WorkerPG and Self then run until it
	// delivered every record too, and cover both handlers' Workers.
	Beside bool
	// HookPG is the webhook handler's own pool's backends' CPU in the same
	// span (-webhook-pool own; 0 otherwise, WorkerPG then has it).
	HookPG time.Duration
	// Stages splits the realtime Worker's commit → accept.
	Stages stageTimes

	ids []string // the committed records
}

// commitMark is one producer's committed record.
type commitMark struct {
	id          string
	committedAt time.Time
	commitTook  time.Duration
}

// runLatency stages single-record transactions at cfg.Rate for
// cfg.LatencyDuration while a Worker (woken by the NOTIFY trigger, or
// polling when cfg.LatencyNotify is off) dispatches, and measures commit →
// broker-accept latency per record.
//
// With recv, a webhook handler delivering to it drains the same records
// beside the realtime Worker.
func runLatency(ctx context.Context, db *benchDB, cfg config, recv *hookrecv.Receiver, progress io.Writer) (res latencyResult, err error) {
	res = latencyResult{Rate: cfg.Rate, Broker: cfg.Broker, Notify: cfg.LatencyNotify, Beside: recv != nil}
	var tl *timeline
	if cfg.SampleWaits > 0 {
		tl = &timeline{}
	}
	store, hook, err := openBeside(ctx, db, cfg, recv, cfg.LatencyNotify, cfg.Retained, true, tl)
	if err != nil {
		return res, err
	}
	defer store.Close()
	// The handler's records are the ones committed here (the retained
	// rows predate it: they are not its).
	defer hook.stop(ctx, &err, func(ctx context.Context) error { return hook.checkIDs(ctx, res.ids) })
	if hook != nil {
		if err := hook.start(ctx); err != nil {
			return res, err
		}
	}
	staged := newStageStore(store, "realtime", tl)
	p, err := db.startProducing(ctx, staged, cfg, cfg.Broker, true, hook.precedence(), cfg.LatencyProducers)
	if err != nil {
		return res, err
	}
	defer p.stop()

	total := int(int64(cfg.Rate) * int64(cfg.LatencyDuration) / int64(time.Second))
	fmt.Fprintf(progress, "latency: staging %d records at %d/s over %d connections (%s broker)\n", total, cfg.Rate, cfg.LatencyProducers, cfg.Broker)
	pg0, all0, self0 := benchkit.ReadAppBackends(ctx, store.Pool(), "herald"), benchkit.ReadBackends(ctx, store.Pool()), benchkit.SelfCPU()
	hookPG0 := benchkit.ReadAppBackends(ctx, store.Pool(), hookApp)
	claims0, empty0, err := p.claims()
	if err != nil {
		return res, err
	}
	hookClaims0, hookEmpty0, err := hook.claims()
	if err != nil {
		return res, err
	}
	staged.reset()
	res.Stages.begin(store.Pool())
	var waits *waitSampler
	tl.start()
	if cfg.SampleWaits > 0 {
		waits = startWaitSampler(ctx, db.URL, cfg.SampleWaits)
	}
	marks, lag, err := pacedStage(ctx, p.producers, cfg, total)
	if err != nil {
		return res, err
	}
	res.MaxLag = lag
	res.Committed = len(marks)
	if len(marks) > 0 {
		first, last := marks[0].committedAt, marks[0].committedAt
		for _, m := range marks {
			first, last = minTime(first, m.committedAt), maxTime(last, m.committedAt)
		}
		res.Elapsed = last.Sub(first)
	}
	err = benchkit.PollUntil(ctx, time.Minute, 5*time.Millisecond, nil, func() (bool, error) {
		return p.pub.accepted.Load() >= int64(len(marks)), nil
	})
	if err != nil {
		return res, fmt.Errorf("outboxbench: latency: %d of %d records accepted: %w", p.pub.accepted.Load(), len(marks), err)
	}
	err = benchkit.PollUntil(ctx, time.Minute, 5*time.Millisecond, nil, func() (bool, error) {
		return hook.done(int64(len(marks)))
	})
	if err != nil {
		return res, fmt.Errorf("outboxbench: latency: the webhook handler: %w", err)
	}
	res.Stages.end(store.Pool(), staged, marks, p.pub.acceptTime)
	sampled := waits.stop()
	res.WorkerPG = benchkit.ReadAppBackends(ctx, store.Pool(), "herald").Since(pg0)
	res.AllPG = benchkit.ReadBackends(ctx, store.Pool()).Since(all0)
	res.HookPG = benchkit.ReadAppBackends(ctx, store.Pool(), hookApp).Since(hookPG0)
	res.Self = benchkit.SelfCPU() - self0
	claims1, empty1, err := p.claims()
	if err != nil {
		return res, err
	}
	res.Claims, res.EmptyClaims = claims1-claims0, empty1-empty0
	hookClaims1, hookEmpty1, err := hook.claims()
	if err != nil {
		return res, err
	}
	res.HookClaims, res.HookEmptyClaims = hookClaims1-hookClaims0, hookEmpty1-hookEmpty0
	commits := make([]time.Duration, 0, len(marks))
	accepts := make([]time.Duration, 0, len(marks))
	var settled []time.Duration
	res.Settle = latencySettle(cfg)
	for _, m := range marks {
		res.ids = append(res.ids, m.id)
		commits = append(commits, m.commitTook)
		at, ok := p.pub.acceptTime(m.id)
		if !ok {
			return res, fmt.Errorf("outboxbench: latency: record %s committed but never accepted", m.id)
		}
		d := at.Sub(m.committedAt)
		if d < 0 {
			res.Early++
			d = 0
		}
		accepts = append(accepts, d)
		if m.committedAt.Sub(marks[0].committedAt) >= res.Settle {
			settled = append(settled, d)
		}
	}
	res.Commit, res.Accept, res.AfterStart = benchkit.Summarize(commits), benchkit.Summarize(accepts), benchkit.Summarize(settled)
	fmt.Fprintf(progress, "latency %s: commit → accept p50 %s p99 %s p99.9 %s; the Worker's PostgreSQL backends %.1f µs CPU per record; %d claims with records, %d empty\n",
		besideText(res.Beside), benchkit.MS(res.Accept.P50), benchkit.MS(res.Accept.P99), benchkit.MS(res.Accept.P999), benchkit.PerRecordMicros(res.WorkerPG, res.Committed),
		res.Claims, res.EmptyClaims)
	fmt.Fprintf(progress, "latency %s: every PostgreSQL backend of the database, the producers' included: %.1f µs CPU per record\n",
		besideText(res.Beside), benchkit.PerRecordMicros(res.AllPG, res.Committed))
	fmt.Fprintf(progress, "latency %s: after the first %v: commit → accept p50 %s p99 %s (%d records)\n", besideText(res.Beside), res.Settle,
		benchkit.MS(res.AfterStart.P50), benchkit.MS(res.AfterStart.P99), len(settled))
	fmt.Fprintf(progress, "latency %s: %s\n", besideText(res.Beside), &res.Stages)
	if res.Beside {
		fmt.Fprintf(progress, "latency %s: the webhook handler's claims: %d with records, %d empty; its own pool's backends %.1f µs CPU per record\n", besideText(res.Beside), res.HookClaims, res.HookEmptyClaims,
			benchkit.PerRecordMicros(res.HookPG, res.Committed))
	}
	if sampled != "" {
		fmt.Fprintf(progress, "latency %s: active backends, %s", besideText(res.Beside), sampled)
		fmt.Fprintf(progress, "latency %s: %s\n", besideText(res.Beside), tl.slowest(marks, p.pub.acceptTime))
	}
	return res, nil
}

// pacedStage hands record numbers to the producers on a fixed schedule
// and collects their commits. It returns the largest lag of the schedule.
func pacedStage(ctx context.Context, pool *pgxpool.Pool, cfg config, total int) ([]commitMark, time.Duration, error) {
	return benchkit.Paced(ctx, cfg.Rate, cfg.LatencyProducers, total, func(k int) (commitMark, error) {
		return stageOneTimed(ctx, pool, k, cfg.Channels)
	})
}

// stageOneTimed stages record k in its own transaction and times the COMMIT.
func stageOneTimed(ctx context.Context, pool *pgxpool.Pool, k, channels int) (commitMark, error) {
	n := stage.Notification{
		ID: uuid.NewString(), TenantID: benchTenant, Channel: channelName(k % channels),
		Type: "bench.record", SchemaVersion: 1,
		Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"note":"outbox benchmark record"}`, k)),
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return commitMark{}, fmt.Errorf("outboxbench: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit
	if _, err := stage.Stage(ctx, tx, n); err != nil {
		return commitMark{}, err
	}
	before := time.Now()
	if err := tx.Commit(ctx); err != nil {
		return commitMark{}, fmt.Errorf("outboxbench: commit: %w", err)
	}
	now := time.Now()
	return commitMark{id: n.ID, committedAt: now, commitTook: now.Sub(before)}, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
