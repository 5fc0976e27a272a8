package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// stagedRecord is one record a producer staged, with its expected payload.
type stagedRecord struct {
	ID      string
	Channel string
	Seq     int
	Payload json.RawMessage
}

// stagedLog remembers, per channel, the ids of committed records in commit
// order.
type stagedLog struct {
	mu        sync.Mutex
	byChannel map[string][]stagedRecord
	total     int
	lastAt    time.Time // when the last commit was logged
}

func newStagedLog() *stagedLog { return &stagedLog{byChannel: map[string][]stagedRecord{}} }

func (l *stagedLog) committed(recs []stagedRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		l.byChannel[r.Channel] = append(l.byChannel[r.Channel], r)
	}
	l.total += len(recs)
	l.lastAt = time.Now()
}

func (l *stagedLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// newRecord builds record seq of channel with a fresh id.
func newRecord(channel string, seq int) (stagedRecord, stage.Notification) {
	id := uuid.NewString()
	payload := json.RawMessage(fmt.Sprintf(`{"channel": %q, "seq": %d}`, channel, seq))
	return stagedRecord{ID: id, Channel: channel, Seq: seq, Payload: payload}, stage.Notification{
		ID: id, TenantID: testTenant, Channel: channel, Type: "crash.test", SchemaVersion: 1, Payload: payload,
	}
}

const testTenant = "acme"

// stageTx stages recs in one transaction of the pool: the producers' path
// (outboxfeed.Stage on the caller's pgx.Tx).
func stageTx(ctx context.Context, pool *pgxpool.Pool, ns []stage.Notification) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, n := range ns {
			if _, err := stage.Stage(ctx, tx, n); err != nil {
				return err
			}
		}
		return nil
	})
}

// openPool opens a small pgx pool and closes it when t ends.
func openPool(t *testing.T, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse database URL: %v", err)
	}
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// stateCounts counts outbox rows per state, plus dispatched rows without
// dispatched_at.
type stateCounts struct {
	Pending, Processing, Dispatched, DeadLetter, DispatchedNoTime int
}

func (c stateCounts) total() int { return c.Pending + c.Processing + c.Dispatched + c.DeadLetter }

func countStates(ctx context.Context, pool *pgxpool.Pool) (stateCounts, error) {
	var c stateCounts
	err := pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE state = 'pending'),
		count(*) FILTER (WHERE state = 'processing'),
		count(*) FILTER (WHERE state = 'dispatched'),
		count(*) FILTER (WHERE state = 'dead_letter'),
		count(*) FILTER (WHERE state = 'dispatched' AND dispatched_at IS NULL)
		FROM herald.outbox_records`).Scan(&c.Pending, &c.Processing, &c.Dispatched, &c.DeadLetter, &c.DispatchedNoTime)
	return c, err
}

// stageShare stages producer p's records: perChannel records on each
// channel of mine, the channels in turn, in transactions of one to four
// records; with pace > 0, one record per pace.
func stageShare(ctx context.Context, pool *pgxpool.Pool, p int, log *stagedLog, mine []string, perChannel int, pace time.Duration) error {
	var tick <-chan time.Time
	if pace > 0 {
		t := time.NewTicker(pace)
		defer t.Stop()
		tick = t.C
	}
	total := perChannel * len(mine)
	for i, size := 0, 1; i < total; size = size%4 + 1 {
		var recs []stagedRecord
		var ns []stage.Notification
		for ; len(recs) < size && i < total; i++ {
			if tick != nil {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-tick:
				}
			}
			r, n := newRecord(mine[i%len(mine)], i/len(mine))
			recs, ns = append(recs, r), append(ns, n)
		}
		if err := stageTx(ctx, pool, ns); err != nil {
			return fmt.Errorf("producer %d: %w", p, err)
		}
		log.committed(recs)
	}
	return nil
}
