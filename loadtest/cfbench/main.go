// Command cfbench measures Centrifugo v6.9.1's PostgreSQL outbox consumer
// on this machine, with the same dataset, flags style and CPU accounting
// as loadtest/outboxbench, so the two reports can be set side by side.
//
// No Centrifugo code is in this repository: cfbench runs a binary built
// from the Go module proxy,
//
//	GOBIN=/tmp/cfbin go install github.com/centrifugal/centrifugo/v6@v6.9.1
//
// (-centrifugo names it; default /tmp/cfbin/centrifugo), writing its JSON
// config into a temp dir at run time: HTTP on 127.0.0.1 and a free port
// only, usage stats off, the memory engine, a namespace "bench" keeping
// history (history_size 100, history_ttl 300s) and one consumer of type
// "postgresql" on Centrifugo's documented outbox table
//
//	outbox (id bigserial PRIMARY KEY, method text, payload bytea, partition int)
//
// with an index on (partition, id). Record i is method "publish", payload
// {"channel":"bench:ch-<i mod 1000>","data":{"n":<i>,"note":"outbox benchmark record"}},
// partition i mod num_partitions. cfbench creates a scratch database
// (cfbench_<random>) on -database-url's server, recreates the table for
// every measurement, stops Centrifugo by PID after each one (also on
// errors and Ctrl-C; the child also gets SIGKILL if cfbench dies), and
// drops the database at the end.
//
// Phases (-phases, all by default):
//
//   - drain: for each -configs shape (<partition_select_limit>x<num_partitions>,
//     default 100x1,1000x1,1000x4; poll -poll-interval, 300ms), -records rows
//     (default 200,000) are inserted, then Centrifugo is started and timed
//     until SELECT count(*) FROM outbox returns 0 (polled every 50 ms).
//   - staged: the same shapes, Centrifugo started first (and seen to consume
//     a warm-up row per partition), then -staged-producers (4) producers
//     insert the rows in -staged-batch (1,000) row COPY transactions; timed
//     from the first insert until count(*) = 0 after the last commit.
//   - latency: a consumer with batch 1,000, 4 partitions and
//     partition_notification_channel (LISTEN/NOTIFY, fed by the per-row
//     pg_notify trigger from Centrifugo's docs; -latency-notify=false polls
//     instead), one WebSocket client (JSON protocol, HS256 JWT whose
//     "channels" claim subscribes it server-side to every bench channel), and
//     16 producers each committing one row per transaction at a paced total
//     -rate (1,000/s) for -latency-duration (10s). Reports COMMIT returned →
//     client received p50/p99/p99.9/max, the achieved rate and CPU.
//   - producers: no consumer at all; -producers (16) producers commit one row
//     per transaction, unpaced, for -producer-duration (5s) each, with the
//     pg_notify trigger off and on (-producer-variants off,on,on,off).
//
// CPU is utime+stime from /proc/<pid>/stat of the Centrifugo process and
// of every process named "postgres" (the whole server, as outboxbench
// counts it) over each measurement; per record is that divided by the
// records. Every phase is bounded (-startup-timeout, -drain-timeout,
// -deliver-timeout, -timeout for the whole run).
//
// Output: a markdown table on stdout (progress on stderr); -json FILE also
// writes the results as JSON, -json - writes only JSON to stdout.
//
//	go run ./loadtest/cfbench                                  # defaults, a few minutes
//	go run ./loadtest/cfbench -records 50000 -latency-duration 5s -producer-duration 2s
//	go run ./loadtest/cfbench -phases drain -configs 1000x4 -json /tmp/cf.json
package main

import (
	"context"
	"flag"
	"os"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

var command = benchkit.Command{
	Name:    "cfbench",
	Summary: "Measures Centrifugo's PostgreSQL outbox consumer and prints a markdown report.",
}

func main() {
	cfg := defaultConfig()
	cfg.register(flag.CommandLine)
	command.Main(cfg.validate, func(ctx context.Context) error {
		return run(ctx, cfg, os.Stdout, os.Stderr)
	})
}

// commandLine is how the program was invoked, for the report.
func commandLine() string { return command.CommandLine() }
