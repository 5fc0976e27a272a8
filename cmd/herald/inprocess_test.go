package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
)

// inProcess is the herald CLI run in a goroutine of the test (run), as
// serve, feed and the refusal tests start it.
type inProcess struct {
	line        string // the command line, for messages
	cancel      context.CancelFunc
	done        chan struct{} // closed when run returned, code set
	code        int
	out, errOut testenv.SyncBuffer
}

// startInProcess runs herald with args until stop.
func startInProcess(args []string) *inProcess {
	ctx, cancel := context.WithCancel(context.Background())
	p := &inProcess{line: "herald " + strings.Join(args, " "), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.code = run(ctx, args, &p.out, &p.errOut)
	}()
	return p
}

// waitUntil polls cond until it holds, failing t if the command exits
// first or bound (a failure bound, not a budget) passes; what names cond.
func (p *inProcess) waitUntil(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out after %s waiting for %s; stderr: %s", p.line, bound, what, p.errOut.String())
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited %d before %s: %s", p.line, p.code, what, p.errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop cancels the command and fails t unless it exits 0 within bound.
func (p *inProcess) stop(t *testing.T, bound time.Duration) {
	t.Helper()
	p.cancel()
	select {
	case <-p.done:
		if p.code != 0 {
			t.Errorf("%s exited %d: %s", p.line, p.code, p.errOut.String())
		}
	case <-time.After(bound):
		t.Errorf("%s did not stop within %s", p.line, bound)
	}
}
