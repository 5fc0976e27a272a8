package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/cfoutbox"
)

// cfOutboxConsumer is Centrifugo's PostgreSQL outbox consumer for one run
// with -publish-via outbox: a table of its own, connbench_cf_<random>, in
// the -database-url database (with its pg_notify trigger notifying a
// channel of the same name), drained by a consumer named after it, so that
// runs never share a table, a LISTEN channel or Centrifugo's per-partition
// advisory locks.
func cfOutboxConsumer(cfg config) cfoutbox.Consumer {
	id := benchkit.RandomHex(6)
	o := cfoutbox.Outbox{Table: "connbench_cf_" + id}
	if cfg.CFNotify {
		o.Notify = o.Table
	}
	return cfoutbox.Consumer{
		Name: "connbench_" + id, DSN: cfg.DatabaseURL, Outbox: o,
		Partitions: cfg.CFPartitions, Batch: cfg.CFBatch, PollInterval: cfg.CFPollInterval,
	}
}

// describeCF is the consumer's shape, for the report.
func describeCF(c *cfoutbox.Consumer) string {
	wake := "polling only"
	if c.Outbox.Notify != "" {
		wake = "per-row pg_notify trigger + LISTEN"
	}
	return fmt.Sprintf("PostgreSQL outbox consumer on table %s: batch %d, %d partitions, %s, poll %v",
		c.Outbox.Table, c.Batch, c.Partitions, wake, c.PollInterval)
}

// withConn runs fn on a connection of its own to databaseURL, bounded by
// 30 s (and not by ctx's cancellation: it also cleans up after a
// cancelled run).
func withConn(ctx context.Context, databaseURL string, fn func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connbench: connect to -database-url: %w", err)
	}
	defer conn.Close(ctx)
	return fn(ctx, conn)
}

// createCFOutbox creates c's table (and trigger) before Centrifugo starts.
func createCFOutbox(ctx context.Context, c *cfoutbox.Consumer) error {
	return withConn(ctx, c.DSN, func(ctx context.Context, conn *pgx.Conn) error {
		if err := c.Outbox.Create(ctx, conn); err != nil {
			return fmt.Errorf("connbench: %w", err)
		}
		return nil
	})
}

// dropCFOutbox drops c's table and trigger function, once Centrifugo has
// stopped.
func dropCFOutbox(ctx context.Context, c *cfoutbox.Consumer) error {
	return withConn(ctx, c.DSN, func(ctx context.Context, conn *pgx.Conn) error {
		if err := c.Outbox.Drop(ctx, conn); err != nil {
			return fmt.Errorf("connbench: %w", err)
		}
		return nil
	})
}

// warmCFOutbox waits until Centrifugo's consumer is draining c's table,
// as /readyz tells of Herald's Worker: one publication per partition (to
// a channel nobody subscribes to) consumed, and with notifications its
// LISTEN connection in place, so the run's first records are not left to
// the poll.
func warmCFOutbox(ctx context.Context, c *cfoutbox.Consumer, timeout time.Duration) error {
	return withConn(ctx, c.DSN, func(wctx context.Context, conn *pgx.Conn) error {
		insert := c.Outbox.InsertSQL()
		for p := range c.Partitions {
			body := cfoutbox.AppendPublish(nil, cfNamespace+":"+c.Outbox.Table+"-warmup", []byte(`{"warmup":`+strconv.Itoa(p)+`}`))
			if _, err := conn.Exec(wctx, insert, body, p); err != nil {
				return fmt.Errorf("connbench: centrifugo outbox warm-up: %w", err)
			}
		}
		listen := `LISTEN ` + pgx.Identifier{c.Outbox.Notify}.Sanitize()
		var left, listening int
		err := benchkit.PollUntil(ctx, timeout, 20*time.Millisecond, fmt.Errorf("timed out after %v", timeout), func() (bool, error) {
			err := conn.QueryRow(wctx, `SELECT (SELECT count(*) FROM `+c.Outbox.Table+`),
				(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = $1)`, listen).Scan(&left, &listening)
			if err != nil {
				return false, err
			}
			return left == 0 && (c.Outbox.Notify == "" || listening > 0), nil
		})
		if err != nil {
			return fmt.Errorf("connbench: centrifugo outbox warm-up (%d of %d rows left, LISTEN connections %d): %w", left, c.Partitions, listening, err)
		}
		return nil
	})
}
