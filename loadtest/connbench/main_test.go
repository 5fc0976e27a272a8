package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// heraldBin is the herald binary the tests start as a child, built once.
var heraldBin string

func TestMain(m *testing.M) {
	if spec := os.Getenv(pollServerEnv); spec != "" {
		os.Exit(servePoll(spec)) // the poll scenario's server, this binary as its child
	}
	dir, err := os.MkdirTemp("", "connbench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	heraldBin, err = buildHerald(ctx, dir, false)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
