package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/redisbroker"
	"github.com/heraldgw/herald/outboxfeed"
)

// recordingPublisher passes messages to the broker and notes when it
// accepted each one.
type recordingPublisher struct {
	next     outboxfeed.Publisher
	accepted atomic.Int64
	first    atomic.Int64 // when the broker first accepted a record (UnixNano; 0: not yet)
	record   bool         // keep per-id accept times

	mu         sync.Mutex
	acceptedAt map[string]time.Time // first accept per id
}

func (p *recordingPublisher) Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error) {
	pub, err := p.next.Publish(ctx, msg)
	if err != nil {
		return pub, err
	}
	now := time.Now()
	if p.accepted.Add(1) == 1 {
		p.first.Store(now.UnixNano())
	}
	if p.record {
		p.mu.Lock()
		if _, dup := p.acceptedAt[msg.ID]; !dup {
			p.acceptedAt[msg.ID] = now
		}
		p.mu.Unlock()
	}
	return pub, nil
}

// firstSince is how long after start the broker first accepted a record
// (0: none yet).
func (p *recordingPublisher) firstSince(start time.Time) time.Duration {
	ns := p.first.Load()
	if ns == 0 {
		return 0
	}
	return time.Unix(0, ns).Sub(start)
}

// markPublished sets *at to the time since start once the broker has
// accepted records records, unless it is set already. A poll calls it
// before it counts the completions and again once they are all in: a
// completion follows its record's acceptance, so the acceptance of the
// last record, made between the two, is never missed (the drain's report
// once read "all accepted after 0s").
func (p *pipeline) markPublished(at *time.Duration, start time.Time, records int) {
	if *at == 0 && p.pub.accepted.Load() >= int64(records) {
		*at = time.Since(start)
	}
}

// acceptTime returns when id was first accepted.
func (p *recordingPublisher) acceptTime(id string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.acceptedAt[id]
	return t, ok
}

// pipeline is an in-process Worker publishing, through a
// recordingPublisher, to a broker (a fanout.MemoryBroker, or a redisbroker.Broker)
// wired to a Hub.
type pipeline struct {
	broker  fanout.Broker
	cleanup func() // after the broker stops: deletes its Redis keys
	pub     *recordingPublisher
	worker  *outboxfeed.Worker
	reg     *prometheus.Registry

	producers *pgxpool.Pool // startProducing's: the producers staging while the Worker runs
	stopped   bool
}

// startPipeline starts the broker (kind "memory" or "redis"), the Hub and
// a Worker over store, leading leads (nil: none).
func startPipeline(ctx context.Context, store outboxfeed.Store, cfg config, kind string, record bool, leads *outboxfeed.Precedence) (*pipeline, error) {
	broker, cleanup, err := newBroker(ctx, cfg, kind)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*pipeline, error) {
		broker.Stop()
		cleanup()
		return nil, err
	}
	hub, err := fanout.NewHub(broker, fanout.HubConfig{})
	if err != nil {
		return fail(err)
	}
	if err := broker.Start(ctx, hub); err != nil {
		return fail(err)
	}
	p := &pipeline{
		broker:  broker,
		cleanup: cleanup,
		pub:     &recordingPublisher{next: broker, record: record, acceptedAt: map[string]time.Time{}},
		reg:     prometheus.NewRegistry(),
	}
	p.worker, err = outboxfeed.NewWorker(store, p.pub, outboxfeed.WorkerConfig{
		BatchSize: cfg.BatchSize, Concurrency: cfg.Concurrency, Lanes: cfg.Lanes, PollInterval: cfg.PollInterval, ActivePollInterval: cfg.ActivePollInterval, CycleInterval: cfg.CycleInterval, Registerer: p.reg,
		Leads: leads,
	})
	if err != nil {
		return fail(err)
	}
	if err := p.worker.Start(ctx); err != nil {
		return fail(err)
	}
	return p, nil
}

// startProducing starts a pipeline as startPipeline does, waits until
// its Worker has reached the store, and opens p.producers, a pool of
// producers connections for the records the phase stages while the
// Worker runs (stop closes it).
func (db *benchDB) startProducing(ctx context.Context, store outboxfeed.Store, cfg config, kind string, record bool, leads *outboxfeed.Precedence, producers int) (*pipeline, error) {
	p, err := startPipeline(ctx, store, cfg, kind, record, leads)
	if err != nil {
		return nil, err
	}
	if err := p.waitReady(ctx); err != nil {
		p.stop()
		return nil, err
	}
	if p.producers, err = db.openPool(ctx, producers); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// newBroker returns a broker of kind, not started, and what deletes its
// state once it is stopped.
func newBroker(ctx context.Context, cfg config, kind string) (fanout.Broker, func(), error) {
	switch kind {
	case "memory-log":
		dir, err := os.MkdirTemp("", "outboxbench-history-")
		if err != nil {
			return nil, nil, fmt.Errorf("outboxbench: history log: %w", err)
		}
		b, err := fanout.NewMemoryBroker(fanout.MemoryConfig{HistoryDir: dir})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, nil, err
		}
		return b, func() { _ = os.RemoveAll(dir) }, nil
	case "redis":
	default:
		b, err := fanout.NewMemoryBroker(fanout.MemoryConfig{})
		return b, func() {}, err
	}
	// A prefix of its own: the run neither sees nor leaves other keys.
	var r [6]byte
	_, _ = rand.Read(r[:])
	prefix := "outboxbench:" + hex.EncodeToString(r[:]) + ":"
	b, err := redisbroker.New(redisbroker.Config{
		URL: cfg.RedisURL, KeyPrefix: prefix,
		HistorySize: fanout.DefaultHistorySize, // the gateway's default
		HistoryTTL:  time.Hour,                 // as cheap as the default 24h; keys of a killed run go sooner
	})
	if err != nil {
		return nil, nil, fmt.Errorf("outboxbench: redis broker: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.Ping(pctx); err != nil {
		b.Stop()
		return nil, nil, fmt.Errorf("outboxbench: redis broker at -redis-url: %w", err)
	}
	return b, func() { deleteKeys(cfg.RedisURL, prefix) }, nil
}

// deleteKeys deletes the keys under prefix (which holds no glob
// characters) from the Redis at url, best effort.
func deleteKeys(url, prefix string) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return
	}
	c := redis.NewClient(opt)
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	flush := func() {
		if len(keys) > 0 {
			_ = c.Unlink(ctx, keys...).Err()
			keys = keys[:0]
		}
	}
	for it.Next(ctx) {
		if keys = append(keys, it.Val()); len(keys) == 1000 {
			flush()
		}
	}
	flush()
}

// stop stops the Worker (giving back its leases), then the broker,
// deletes what the broker left in Redis, and closes the producers' pool.
// Stopping again does nothing.
func (p *pipeline) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	p.worker.Stop()
	p.broker.Stop()
	p.cleanup()
	if p.producers != nil {
		p.producers.Close()
	}
}

// finish ends a phase's pipeline: it stops it and, unless waiting for
// the Worker failed (err, returned wrapped), checks that the realtime
// handler has records records in pool's database, all dispatched.
func (p *pipeline) finish(ctx context.Context, pool *pgxpool.Pool, phase string, records int, err error) error {
	p.stop()
	if err != nil {
		return fmt.Errorf("outboxbench: %s: %w", phase, err)
	}
	return checkDispatched(ctx, pool, outboxfeed.RealtimeHandler, phase, records)
}

// completed is the Worker's count of records completed after the broker
// accepted them (herald_outbox_outcomes_total{result="success"}).
func (p *pipeline) completed() (int64, error) {
	return p.counter("herald_outbox_outcomes_total", outboxfeed.OutcomeSuccess)
}

// claims is how many claims the Worker made, with records and empty.
func (p *pipeline) claims() (batch, empty int64, err error) {
	if batch, err = p.counter("herald_outbox_claims_total", outboxfeed.ClaimBatch); err != nil {
		return 0, 0, err
	}
	empty, err = p.counter("herald_outbox_claims_total", outboxfeed.ClaimEmpty)
	return batch, empty, err
}

// counter reads the Worker's counter name{result=result}.
func (p *pipeline) counter(name, result string) (int64, error) {
	mfs, err := p.reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("outboxbench: gather worker metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return int64(m.GetCounter().GetValue()), nil
				}
			}
		}
	}
	return 0, nil
}

// waitReady waits until the Worker has reached the store.
func (p *pipeline) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !p.worker.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("outboxbench: worker not ready: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
	return nil
}
