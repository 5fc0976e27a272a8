// Command herald is the Herald realtime notification gateway: one binary
// with subcommands to serve, run the outbox Worker, manage the schema, stage
// notifications, mint development tokens and operate the outbox.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the gateway and (unless --feed=false) the outbox Worker", runServe},
		{"feed", "run only the outbox Worker", runFeed},
		{"migrate", "apply the outbox schema", runMigrate},
		{"publish", "stage one notification in the outbox", runPublish},
		{"token", "mint a development token with the configured HMAC secret", runToken},
		{"outbox", "operate the outbox: stats, list, replay, purge", runOutbox},
		{"handlers", "operate the handlers: list, pause, resume, enable, drop", runHandlers},
		{"types", "print the type catalogue; types check gates a new writer on the live Workers reading its type", runTypes},
		{"alerts", "write the Prometheus alert rules of the handlers' delivery targets", runAlerts},
		{"revoke", "revoke a session (sid) or token (jti); revoke list shows them", runRevoke},
		{"genconfig", "write a config file of a command's settings at their defaults", runGenconfig},
		{"version", "print the version, Go toolchain and commit", runVersion},
	}
}

// errUsage marks errors whose message is enough; no stack of help text.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		usage(stderr) // a mistake: the help goes with the error status
		return 2
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help":
		usage(stdout) // asked for: help is the output
		return 0
	case args[0] == "-version" || args[0] == "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "herald %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "herald %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "herald: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Herald — realtime notifications from a transactional outbox.")
	fmt.Fprintln(w, "\nUsage: herald <command> [flags]   (herald <command> -h for its flags; herald --version)")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
}
