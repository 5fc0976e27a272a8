// Command webhookbench measures Herald's webhook delivery through the
// outbox: records staged in PostgreSQL, drained by a webhook handler's
// Worker (outboxfeed/webhookhandler, at the endpoint's max_in_flight) to a
// receiver that answers 204 — beside the floor, a bare net/http client
// POSTing the same bodies with the same concurrency and keep-alive.
//
// The receiver is this binary run again as a process of its own, so the
// CPU time counted as Herald's (getrusage of this process) is the
// sender's alone. The command creates its own database on the server
// named by -database-url and drops it on exit, and prints a markdown
// report. Each round runs every variant once; the order of the variants
// reverses from one round to the next (ABBA), so neither gains from
// running second:
//
//   - worker: -records records over -channels channels are staged (COPY)
//     while no Worker runs; then the handler's Worker starts and the time
//     from its start until every record is completed counts. Its CPU
//     includes the Worker's PostgreSQL client work; PostgreSQL's own
//     (the backends of the bench database) is reported beside it.
//   - endpoint: Endpoint.Deliver (body encoding, signing, request,
//     classification) from max_in_flight goroutines, no outbox.
//   - floor: a bare net/http client POSTing the same bodies, already
//     encoded and unsigned, from max_in_flight goroutines, keep-alive.
//
// For example:
//
//	go run ./loadtest/webhookbench                   # defaults, under a minute
//	go run ./loadtest/webhookbench -records 50000 -rounds 4 -cpuprofile /tmp/wh.prof
package main

import (
	"context"
	"flag"
	"os"

	"github.com/heraldgw/herald/internal/hookrecv"
	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

var command = benchkit.Command{
	Name:       "webhookbench",
	Summary:    "Measures webhook delivery through the outbox beside a bare net/http client and prints a markdown report.",
	CPUProfile: "write this process's CPU profile (every round) to this file",
}

func main() {
	hookrecv.MaybeServe()
	cfg := defaultConfig()
	cfg.register(flag.CommandLine)
	command.Main(cfg.validate, func(ctx context.Context) error {
		return run(ctx, cfg, os.Stdout, os.Stderr)
	})
}

// commandLine is how the program was invoked, for the report.
func commandLine() string { return command.CommandLine() }
