package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/loadtest/internal/cfoutbox"
)

// outboxPublisher publishes as an application does: each publication is
// staged in a transaction of its own on one of -producers pooled
// connections, and the server's outbox consumer publishes it to the
// broker. For Herald, BEGIN, outboxfeed.Stage, COMMIT (its Worker claims
// the record); for Centrifugo, BEGIN, one INSERT of a publish command into
// its outbox table, COMMIT (its PostgreSQL consumer reads, publishes and
// deletes the row). Either way the time COMMIT returned is recorded in
// the run's commitLog under the publication's sequence number k, which
// the payload carries to the subscribers (as does Herald's message id,
// below).
type outboxPublisher struct {
	pool     *pgxpool.Pool
	cf       *cfoutbox.Consumer // Centrifugo's consumer; nil for Herald
	runID    string
	tenant   string
	channels []string
	pad      string
	workers  int
	commits  *commitLog
	info     outboxInfo
	burstN   int       // > 0: run commits this many publications at once (runBurst)
	burst    burstInfo // what runBurst measured
	// beforeCommit runs in runBurst once everything is staged, just
	// before the commits (the drain's starting snapshot).
	beforeCommit func()

	tx histogram // BEGIN → COMMIT returned

	// sourceTally: per channel the sequence numbers of committed
	// records; failed transactions by step and error; sent counts the
	// transactions begun.
	sourceTally
}

// outboxInfo describes the outbox side of a run, for the report.
type outboxInfo struct {
	database  string // the database name
	table     string // the table the producers insert into
	postgres  string // server version and commit settings
	producers int
}

func (r *runner) openOutboxPublisher(ctx context.Context) (*outboxPublisher, error) {
	cf := r.tgt.cfOutbox
	if r.cfg.centrifugo() != (cf != nil) {
		return nil, fmt.Errorf("connbench: outbox publisher: server %s without its outbox consumer", r.cfg.Server)
	}
	table := heraldOutbox
	if cf != nil {
		table = cf.Outbox.Table
	}
	pool, err := openProducerPool(ctx, r.cfg.DatabaseURL, r.cfg.Producers, table)
	if err != nil {
		return nil, err
	}
	p := &outboxPublisher{
		pool: pool, cf: cf, runID: r.runID, tenant: r.cfg.Tenant,
		pad: strings.Repeat("x", r.cfg.PayloadBytes), workers: r.cfg.Producers, commits: r.commits, burstN: r.cfg.Burst,
		info:        outboxInfo{database: dbName(r.cfg.DatabaseURL), table: table, postgres: postgresInfo(ctx, pool), producers: r.cfg.Producers},
		sourceTally: newSourceTally(r.cfg.channels()),
	}
	for c := range r.cfg.channels() {
		p.channels = append(p.channels, r.channelName(c))
	}
	return p, nil
}

// messageID is publication k's outbox id: the run id and k, so every
// record of a run can be found in herald.outbox (a valid version-4 layout).
func (p *outboxPublisher) messageID(k int) string {
	return fmt.Sprintf("%s-0000-4000-8000-%012x", p.runID, k)
}

// run stages rate publications/s for d, round-robin over the channels:
// the pacer hands publication k to the next free producer at its due time
// (waiting, and counting the lag, when all are busy), then waits up to
// wait for the transactions still open.
func (p *outboxPublisher) run(ctx context.Context, rate int, d, wait time.Duration) error {
	if p.burstN > 0 {
		return p.runBurst(ctx, p.burstN, wait)
	}
	total := int(float64(rate) * d.Seconds())
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			var b stageBufs
			for k := range jobs {
				p.stage(wctx, k, &b)
			}
		})
	}
	err := p.pace(ctx, jobs, rate, total)
	close(jobs)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
		cancel()
		<-done
		if err == nil {
			err = fmt.Errorf("connbench: outbox publisher: transactions still open after %v", wait)
		}
	}
	return err
}

// pace sends 0…total-1 to jobs, publication k at start + k/rate.
func (p *outboxPublisher) pace(ctx context.Context, jobs chan<- int, rate, total int) error {
	return paceEach(ctx, "outbox publisher", rate, total, func(k int, due time.Time) error {
		select {
		case jobs <- k:
		case <-ctx.Done():
			return fmt.Errorf("connbench: outbox publisher: %w", ctx.Err())
		}
		lag := time.Since(due)
		p.mu.Lock()
		p.sent++
		p.maxLag = max(p.maxLag, lag)
		p.mu.Unlock()
		return nil
	})
}

// stageBufs are one producer's buffers, reused from one transaction to
// the next (pgx is done with them once Commit returns).
type stageBufs struct {
	data   []byte // the publication's data
	record []byte // Centrifugo: the publish command holding it
}

// stage runs publication k's transaction: BEGIN, Stage (Herald) or INSERT
// (Centrifugo), COMMIT. The payload's t is the time just before BEGIN; the
// COMMIT time is taken as soon as Commit returns.
func (p *outboxPublisher) stage(ctx context.Context, k int, b *stageBufs) {
	begin := time.Now()
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		p.fail("begin", err)
		return
	}
	if err := p.stageOne(ctx, tx, k, begin, b); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return
	}
	if err := tx.Commit(ctx); err != nil {
		p.fail("commit", err)
		return
	}
	committed := time.Now()
	p.commits.set(uint64(k), committed)
	p.tx.record(committed.Sub(begin))
	p.mu.Lock()
	p.accept(k%len(p.channels), uint64(k))
	p.mu.Unlock()
}

// stageOne stages publication k in tx, its payload's t at t:
// outboxfeed.Stage (Herald) or one INSERT of a publish command
// (Centrifugo). A failure is counted (fail) and returned.
func (p *outboxPublisher) stageOne(ctx context.Context, tx pgx.Tx, k int, t time.Time, b *stageBufs) error {
	c := k % len(p.channels)
	b.data = appendData(b.data[:0], t, int64(k), p.pad)
	step := "stage"
	var err error
	if p.cf != nil {
		step = "insert"
		b.record = cfoutbox.AppendPublish(b.record[:0], p.channels[c], b.data)
		_, err = tx.Exec(ctx, p.cf.Outbox.InsertSQL(), b.record, cfPartition(c, p.cf.Partitions))
	} else {
		want := p.messageID(k)
		var id string
		id, err = stage.Stage(ctx, tx, stage.Notification{
			ID: want, TenantID: p.tenant, Channel: p.channels[c],
			Type: "bench.tick", SchemaVersion: 1, Payload: b.data,
		})
		if err == nil && id != want {
			err = fmt.Errorf("outboxfeed.Stage returned id %s, want %s", id, want)
		}
	}
	if err != nil {
		p.fail(step, err)
	}
	return err
}

// cfPartition is the Centrifugo outbox partition of channel index c: by
// channel, so that one partition, consumed in order under its advisory
// lock, carries all of a channel's records and they are published in
// commit order (as Herald partitions by channel). With round-robin
// publishing over a channel count that partitions divides, as in the
// 5,000-channel comparison, this is k mod partitions.
func cfPartition(c, partitions int) int { return c % partitions }

// fail counts a failed transaction under its step and (shortened) error.
func (p *outboxPublisher) fail(step string, err error) {
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120] + "…"
	}
	p.mu.Lock()
	p.errs[step+": "+msg]++
	p.mu.Unlock()
}

// close closes the producer connections.
func (p *outboxPublisher) close() { p.pool.Close() }
