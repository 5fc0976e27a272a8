// Command outboxbench measures Herald's PostgreSQL outbox: the sustained
// drain rate of the Worker (claim → publish → complete), the latency from
// a producer's COMMIT to the broker accepting the record at a paced rate,
// and what the Worker's wake-up trigger costs the producers' commits.
//
// It creates its own database on the server named by -database-url and
// drops it on exit, runs an in-process outboxfeed.Worker publishing to a
// fanout.MemoryBroker wired to a Hub (no network broker, so the numbers are
// the outbox's own), and prints a markdown report.
//
//	go run ./loadtest/outboxbench                       # defaults, a few minutes
//	go run ./loadtest/outboxbench -records 20000 -latency-duration 5s -producer-duration 3s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
)

func main() {
	cfg := defaultConfig()
	cfg.register(flag.CommandLine)
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile to this file")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "Usage: outboxbench [flags]\n\nMeasures the Herald outbox on PostgreSQL and prints a markdown report.\n\nFlags:")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "outboxbench: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "outboxbench: %v\n", err)
		os.Exit(2)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "outboxbench: %v\n", err)
			os.Exit(2)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "outboxbench: cpu profile: %v\n", err)
			os.Exit(2)
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "outboxbench: %v\n", err)
		stop()
		os.Exit(1)
	}
}

// commandLine is how the program was invoked, for the report.
func commandLine() string {
	return "go run ./loadtest/outboxbench " + strings.Join(os.Args[1:], " ")
}
