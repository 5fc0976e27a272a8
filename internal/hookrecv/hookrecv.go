// Package hookrecv is the webhook receiver of the load tests and of
// outboxfeed/webhook's benchmarks: a process of its own (the benchmark's
// binary run again) that reads every request's body and answers 204, so
// that its CPU time is not counted as the sender's.
package hookrecv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
)

// env makes the binary a receiver (see MaybeServe).
const env = "HERALD_LOADTEST_HOOK_RECEIVER"

// MaybeServe, called first in main, serves as a receiver and exits when
// the process was started by Start; otherwise it returns at once.
func MaybeServe() {
	if os.Getenv(env) != "1" {
		return
	}
	os.Exit(serve(os.Stdin, os.Stdout))
}

// serve listens on loopback, prints its address to out, answers every
// request 204 after reading its body, and serves until in closes; then
// it prints how many requests it answered.
func serve(in io.Reader, out io.Writer) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var n atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(out, "listening %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, in)
	_ = srv.Close()
	fmt.Fprintf(out, "answered %d\n", n.Load())
	return 0
}

// Receiver is a running receiver process.
type Receiver struct {
	URL string // where to POST
	Pid int    // the process, for its CPU time (benchkit.ProcCPU)

	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// Start runs this binary again as a receiver (its main must call
// MaybeServe first) and waits until it listens.
func Start() (*Receiver, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("hookrecv: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("hookrecv: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("hookrecv: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("hookrecv: start: %w", err)
	}
	r := &Receiver{Pid: cmd.Process.Pid, cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	line, err := r.out.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		_, _ = r.Stop()
		return nil, fmt.Errorf("hookrecv: receiver did not start: %q %v", line, err)
	}
	r.URL = "http://" + addr + "/hooks/herald"
	return r, nil
}

// Stop ends the receiver and returns how many requests it answered.
func (r *Receiver) Stop() (int64, error) {
	_ = r.stdin.Close()
	var n int64
	line, _ := r.out.ReadString('\n')
	_, scanErr := fmt.Sscanf(line, "answered %d", &n)
	err := r.cmd.Wait()
	if err == nil && scanErr != nil {
		err = errors.New("hookrecv: receiver did not report its count")
	}
	return n, err
}

// Counter passes records to a Deliverer and counts the distinct records
// it delivered, and every delivery (a record delivered again counts
// again). Its own cost is counted as the sender's CPU, so it keeps it
// small: the ids seen are spread over shards, each with its own lock, and
// the deliveries in flight are summed as time spent in Deliver (Little's
// law), with no lock at all.
type Counter struct {
	next      outboxfeed.Deliverer
	distinct  atomic.Int64
	successes atomic.Int64
	busy      atomic.Int64 // nanoseconds spent in Deliver calls that returned
	shards    [counterShards]struct {
		mu   sync.Mutex
		seen map[string]struct{}
	}
}

// counterShards is how many locks the ids seen are spread over.
const counterShards = 64

// NewCounter counts next's deliveries.
func NewCounter(next outboxfeed.Deliverer) *Counter {
	c := &Counter{next: next}
	for i := range c.shards {
		c.shards[i].seen = map[string]struct{}{}
	}
	return c
}

// Deliver implements outboxfeed.Deliverer.
func (c *Counter) Deliver(ctx context.Context, r *outboxfeed.Record) error {
	start := time.Now()
	err := c.next.Deliver(ctx, r)
	c.busy.Add(int64(time.Since(start)))
	if err != nil {
		return err
	}
	c.successes.Add(1)
	var h uint32 = 2166136261 // FNV-1a of the id
	for i := 0; i < len(r.ID); i++ {
		h = (h ^ uint32(r.ID[i])) * 16777619
	}
	s := &c.shards[h%counterShards]
	s.mu.Lock()
	if _, dup := s.seen[r.ID]; !dup {
		s.seen[r.ID] = struct{}{}
		c.distinct.Add(1)
	}
	s.mu.Unlock()
	return nil
}

// InFlight is the time spent in the Deliver calls that returned so far:
// its growth over a span, divided by the span, is how many were in flight
// on average (the calls under way at either end aside).
func (c *Counter) InFlight() time.Duration { return time.Duration(c.busy.Load()) }

// Distinct is how many distinct records were delivered.
func (c *Counter) Distinct() int64 { return c.distinct.Load() }

// Successes is how many deliveries succeeded, repeats included.
func (c *Counter) Successes() int64 { return c.successes.Load() }
