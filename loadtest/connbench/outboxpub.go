package main

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/outboxfeed"
)

// outboxPublisher publishes as an application does: each publication is
// staged with outboxfeed.Stage in a transaction of its own (BEGIN, Stage,
// COMMIT) on one of -producers pooled connections; the server's outbox
// Worker claims the record and publishes it to the broker. The time COMMIT
// returned is recorded in the run's commitLog under the publication's
// sequence number k, which the payload carries to the subscribers (as
// does the message id, below).
type outboxPublisher struct {
	pool     *pgxpool.Pool
	runID    string
	tenant   string
	channels []string
	pad      string
	workers  int
	commits  *commitLog
	info     outboxInfo

	tx histogram // BEGIN → COMMIT returned

	mu     sync.Mutex
	seqs   [][]uint64     // per channel: sequence numbers of committed records
	errs   map[string]int // failed transactions, by step and error
	sent   int            // transactions begun
	maxLag time.Duration  // how far the pacer fell behind its schedule
}

// outboxInfo describes the outbox side of a run, for the report.
type outboxInfo struct {
	database  string // the database name
	postgres  string // server version and commit settings
	producers int
}

func (r *runner) openOutboxPublisher(ctx context.Context) (*outboxPublisher, error) {
	pool, err := openProducerPool(ctx, r.cfg.DatabaseURL, r.cfg.Producers)
	if err != nil {
		return nil, err
	}
	p := &outboxPublisher{
		pool: pool, runID: r.runID, tenant: r.cfg.Tenant,
		pad: strings.Repeat("x", r.cfg.PayloadBytes), workers: r.cfg.Producers, commits: r.commits,
		info: outboxInfo{database: dbName(r.cfg.DatabaseURL), postgres: postgresInfo(ctx, pool), producers: r.cfg.Producers},
		seqs: make([][]uint64, r.cfg.channels()), errs: make(map[string]int),
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
	total := int(float64(rate) * d.Seconds())
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			buf := make([]byte, 0, 64+len(p.pad))
			for k := range jobs {
				buf = p.stage(wctx, k, buf)
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
	start := time.Now()
	for k := range total {
		due := dueAt(start, k, rate)
		if err := sleepUntil(ctx, due); err != nil {
			return fmt.Errorf("connbench: outbox publisher: %w", err)
		}
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
	}
	return nil
}

// stage runs publication k's transaction: BEGIN, Stage, COMMIT. The
// payload's t is the time just before BEGIN; the COMMIT time is taken as
// soon as Commit returns. buf holds the payload (reused; pgx is done with
// it once Commit returns).
func (p *outboxPublisher) stage(ctx context.Context, k int, buf []byte) []byte {
	c := k % len(p.channels)
	begin := time.Now()
	buf = appendData(buf[:0], begin, int64(k), p.pad)
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		p.fail("begin", err)
		return buf
	}
	want := p.messageID(k)
	id, err := outboxfeed.Stage(ctx, tx, outboxfeed.Notification{
		ID: want, TenantID: p.tenant, Channel: p.channels[c],
		Type: "bench.tick", SchemaVersion: 1, Payload: buf,
	})
	if err == nil && id != want {
		err = fmt.Errorf("outboxfeed.Stage returned id %s, want %s", id, want)
	}
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		p.fail("stage", err)
		return buf
	}
	if err := tx.Commit(ctx); err != nil {
		p.fail("commit", err)
		return buf
	}
	committed := time.Now()
	p.commits.set(uint64(k), committed)
	p.tx.record(committed.Sub(begin))
	p.mu.Lock()
	p.seqs[c] = append(p.seqs[c], uint64(k))
	p.mu.Unlock()
	return buf
}

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

// accepted returns the sequence numbers of channel c's committed records,
// in commit order.
func (p *outboxPublisher) accepted(c int) []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seqs[c]
}

func (p *outboxPublisher) stats() (sent int, errs map[string]int, maxLag time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent, maps.Clone(p.errs), p.maxLag
}

// close closes the producer connections.
func (p *outboxPublisher) close() { p.pool.Close() }
