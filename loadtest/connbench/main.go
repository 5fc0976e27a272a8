// Command connbench is Herald's connection load generator. It opens many
// subscriber connections (WebSocket herald.v1 or SSE), each with its own
// token, and measures what the server costs per connection and how it
// delivers publications to them:
//
//   - idle: open -conns connections over -channels channels, hold them for
//     -duration, report the server's memory (RSS, Go heap, stacks,
//     goroutines) per connection;
//   - broadcast: -conns subscribers of one channel, publish -rate/s for
//     -duration, report deliveries/s, server CPU per delivery, delivery
//     latency quantiles and any publication missing, repeated or out of
//     order at any subscriber;
//   - fanout: as broadcast, over -channels channels, published round-robin;
//   - poll: one update stream to -conns clients by polling a
//     PostgreSQL-backed endpoint every -poll-interval, then by SSE through
//     Herald's outbox, side by side: staleness, server and database CPU,
//     bytes (poll.go).
//
// By default it builds ./cmd/herald and starts `herald serve` as a child
// on a loopback port (embedded SQLite, in-memory broker, a random HS256
// secret); -url targets a running server instead (loopback only). The
// publisher is one WebSocket using the publish op, the fastest path the
// server offers; with -publish-via outbox it stages each publication in
// PostgreSQL's herald.outbox in its own transaction, as an application
// does, and the report adds the latency from COMMIT to the subscriber
// (a child then gets a fresh database of its own). -server centrifugo puts
// Centrifugo v6.9.1 under the same load for comparison, publishing through
// its server API, or with -publish-via outbox through its PostgreSQL
// outbox consumer on a table of the run's own. Every run is bounded in
// connections (15,000) and time, and ends with a markdown report.
// docs/loadtest.md explains every number.
//
//	go run ./loadtest/connbench -scenario idle -conns 5000 -duration 10s
//	go run ./loadtest/connbench -scenario broadcast -conns 2000 -rate 100 -duration 10s
//	go run ./loadtest/connbench -publish-via outbox -database-url postgres://postgres@127.0.0.1:5432/test
//	go run ./loadtest/connbench -serve-only          # a server for the k6 scripts
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/cfoutbox"
	"github.com/heraldgw/herald/loadtest/internal/scratchdb"
)

func main() {
	if spec := os.Getenv(pollServerEnv); spec != "" {
		os.Exit(servePoll(spec)) // the poll scenario's server (pollserver.go)
	}
	cfg := defaultConfig()
	cfg.register(flag.CommandLine)
	benchkit.Command{
		Name:    "connbench",
		Summary: "Loads a Herald server with many connections and prints a markdown report.",
	}.Parse(cfg.validate)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := mainErr(ctx, cfg, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// mainErr runs cfg and returns the exit code: 0, 1 for a failed run or a
// failed delivery check.
func mainErr(ctx context.Context, cfg config, out, progress io.Writer) (code int) {
	limit, err := raiseNoFile()
	if err != nil {
		fmt.Fprintln(progress, err)
		return 1
	}
	// Each connection is one descriptor on each side; leave room for the
	// server's store, listeners and the generator's own files.
	if need := uint64(cfg.Conns) + 256; need > limit {
		fmt.Fprintf(progress, "connbench: -conns %d needs %d open files per process; the limit is %d\n", cfg.Conns, need, limit)
		return 1
	}
	if cfg.Scenario == "poll" {
		return runPoll(ctx, cfg, out, progress)
	}
	var consumer *cfoutbox.Consumer
	switch {
	case cfg.PublishVia == "outbox" && cfg.centrifugo():
		// A table of this run's own in the given database, dropped once
		// Centrifugo has stopped (deferred: after tgt.stop below).
		c := cfOutboxConsumer(cfg)
		if err := createCFOutbox(ctx, &c); err != nil {
			fmt.Fprintln(progress, err)
			return 1
		}
		consumer = &c
		fmt.Fprintf(progress, "connbench: centrifugo outbox table %s in database %s (dropped at the end)\n", c.Outbox.Table, dbName(cfg.DatabaseURL))
		defer func() {
			if err := dropCFOutbox(ctx, &c); err != nil {
				fmt.Fprintln(progress, err)
				code = 1
			}
		}()
	case cfg.PublishVia == "outbox" && cfg.URL == "":
		// The child and the producers share a database of this run's own,
		// dropped once the child has stopped: runs never share an outbox.
		db, err := scratchdb.Create(ctx, cfg.DatabaseURL, "herald_connbench_")
		if err != nil {
			fmt.Fprintln(progress, err)
			return 1
		}
		fmt.Fprintf(progress, "connbench: outbox database %s (dropped at the end)\n", db.Name)
		defer func() {
			if err := db.Drop(); err != nil {
				fmt.Fprintln(progress, err)
				code = 1
			}
		}()
		cfg.DatabaseURL = db.URL
	}
	var tgt *target
	switch {
	case cfg.centrifugo():
		if tgt, err = startCentrifugo(ctx, cfg, consumer); err != nil {
			fmt.Fprintln(progress, err)
			return 1
		}
		fmt.Fprintf(progress, "connbench: %s at %s (log %s)\n", tgt.desc, tgt.base, tgt.child.LogPath)
	case cfg.URL != "":
		tgt = remoteTarget(cfg)
	default:
		tgt, err = startChild(ctx, cfg, progress)
		if err != nil {
			fmt.Fprintln(progress, err)
			return 1
		}
		fmt.Fprintf(progress, "connbench: %s at %s (log %s)\n", tgt.desc, tgt.base, tgt.child.LogPath)
	}
	if cfg.ServeOnly {
		if err := serveOnly(ctx, cfg, tgt, out); err != nil {
			fmt.Fprintln(progress, err)
			code = 1
		}
	} else {
		res, err := run(ctx, cfg, tgt, progress)
		if err == nil && cfg.Stages {
			err = addStages(res, tgt)
		}
		switch {
		case err != nil:
			fmt.Fprintln(progress, err)
			code = 1
		default:
			res.print(out)
			if err := res.integrity(); err != nil {
				fmt.Fprintln(progress, err)
				code = 1
			}
		}
	}
	if err := tgt.stop(); err != nil {
		fmt.Fprintln(progress, err)
		code = 1
	}
	return code
}
