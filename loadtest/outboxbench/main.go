// Command outboxbench measures Herald's PostgreSQL outbox: the sustained
// drain rate of the Worker (claim → publish → complete), the latency from
// a producer's COMMIT to the broker accepting the record at a paced rate,
// and what a draining Worker and its wake-up trigger cost the producers'
// commits. Its phases mirror loadtest/cfbench's, so that a run of both on
// the same machine compares Herald with Centrifugo's PostgreSQL consumer.
//
// It creates its own database on the server named by -database-url and
// drops it on exit, runs an in-process outboxfeed.Worker publishing to a
// fanout.MemoryBroker wired to a Hub (no network broker, so the numbers are
// the outbox's own; -broker redis publishes to Redis instead), and prints
// a markdown report. The phases (-phases, comma-separated, in this order):
//
//   - drain: stages -records rows over -channels channels with COPY while
//     no Worker runs, then starts one and times Worker start → every
//     record completed.
//   - staged: starts the Worker on an empty table, then -staged-producers
//     producers insert -records rows in transactions of -staged-batch rows
//     (COPY), each taking the next chunk from a shared counter; times first
//     insert → every record completed after the last commit.
//   - latency: stages single-row transactions at -rate for
//     -latency-duration over -latency-producers connections and measures
//     COMMIT returned → broker accepted per record.
//   - producers: -producers connections commit single-row transactions as
//     fast as they can for -producer-duration per variant, -producer-variants
//     in run order: <worker|none>/<on|off>, a Worker draining (memory broker)
//     or no consumer at all, with the NOTIFY trigger installed or dropped.
//     The default, worker/on,none/off,none/off,worker/on (ABBA), compares the
//     Worker as deployed with the no-consumer baseline and reports the ratio
//     of their mean commit rates (target ≥ 0.95);
//     worker/on,worker/off,worker/off,worker/on isolates the trigger.
//
// Flags that shape the phases:
//
//   - -broker memory|redis (drain, staged, latency): redis publishes
//     through a redisbroker.Broker on -redis-url (default
//     redis://127.0.0.1:6379/0), under a key prefix unique to the run and
//     the gateway's default history size; its keys are deleted afterwards.
//   - -hold-xmin (drain, staged): before the records are staged (and the
//     Worker starts), a transaction on a connection of its own takes an xid
//     (SELECT pg_current_xact_id()) and stays open until the phase ends,
//     holding back the xmin horizon; then it is rolled back.
//   - -webhook (drain, latency): runs each of them four times, alone,
//     beside, beside, alone; beside, a webhook handler (outboxfeed/
//     webhookhandler, default settings) is registered (starting from new
//     records: the retained rows are not its) and drains the same
//     records beside the realtime Worker, delivering to a receiver that
//     answers 204 in a process of its own (this binary run again). The
//     report compares the realtime drain rate, its commit → accept p99
//     and the PostgreSQL CPU per record and handler, beside ÷ alone.
//     The webhook handler's Worker yields to the realtime one while it
//     has a backlog, as herald feed runs them (outboxfeed.Precedence);
//     -webhook-yield=false runs it without. -webhook-pool own gives the
//     handler's Worker a connection pool of its own (own-poll: and no
//     LISTEN connection), for diagnosis, and its backends' CPU is then
//     printed apart (application_name herald-hook); -webhook-max-in-flight
//     N and -webhook-claim-delay D set its max_in_flight and claim_delay;
//     -webhook-null makes its deliveries succeed at once without a
//     request (its Worker's store calls alone); -webhook-stats-interval D
//     sets how often its Worker reads its backlog statistics. The report also compares realtime's commit →
//     accept p99 of the records committed after the first second of each
//     latency run (a tenth of shorter runs).
//   - -sample-waits D (latency): samples pg_stat_activity every D during
//     each latency run and prints what the active backends did, how often
//     the wake-up trigger was armed, and when realtime's slowest 1 % of
//     records were committed beside the store calls of both handlers
//     under way then. Every latency run also prints realtime's commit →
//     claimed and claimed → accepted, its store calls' durations, the
//     pool's waits and the Go scheduler's latency; commit → the start of
//     the store call that returned the record and the rest of that call;
//     the kernel's CPU pressure (/proc/pressure/cpu, time some runnable
//     task waited for a CPU) and the garbage collections over the run;
//     and, beside, realtime's store calls split by whether one of the
//     webhook handler's store calls or deliveries was under way when
//     they began (or at any time during them).
//   - -staged-producers (default 4), -staged-batch (default 1,000): the
//     staged phase's producers and rows per transaction.
//
// For example:
//
//	go run ./loadtest/outboxbench                       # defaults, a few minutes
//	go run ./loadtest/outboxbench -records 20000 -latency-duration 5s -producer-duration 3s
//	go run ./loadtest/outboxbench -phases drain,staged -broker redis -hold-xmin
//	go run ./loadtest/outboxbench -phases drain,latency -webhook -records 50000 -latency-duration 10s
package main

import (
	"context"
	"flag"
	"os"

	"github.com/heraldgw/herald/internal/hookrecv"
	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

var command = benchkit.Command{
	Name:       "outboxbench",
	Summary:    "Measures the Herald outbox on PostgreSQL and prints a markdown report.",
	CPUProfile: "write this process's CPU profile to this file",
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
