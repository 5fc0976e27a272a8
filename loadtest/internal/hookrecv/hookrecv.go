// Package hookrecv is the webhook receiver of the load tests: a process
// of its own (the benchmark's binary run again) that reads every request's
// body and answers 204, so that its CPU time is not counted as the
// sender's.
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
// again).
type Counter struct {
	next      outboxfeed.Deliverer
	distinct  atomic.Int64
	successes atomic.Int64

	mu       sync.Mutex
	seen     map[string]struct{}
	inFlight int           // Deliver calls in progress
	last     time.Time     // when inFlight last changed
	area     time.Duration // ∫ inFlight dt
}

// NewCounter counts next's deliveries.
func NewCounter(next outboxfeed.Deliverer) *Counter {
	return &Counter{next: next, seen: map[string]struct{}{}}
}

// Deliver implements outboxfeed.Deliverer.
func (c *Counter) Deliver(ctx context.Context, r *outboxfeed.Record) error {
	c.step(+1)
	err := c.next.Deliver(ctx, r)
	c.step(-1)
	if err != nil {
		return err
	}
	c.successes.Add(1)
	c.mu.Lock()
	if _, dup := c.seen[r.ID]; !dup {
		c.seen[r.ID] = struct{}{}
		c.distinct.Add(1)
	}
	c.mu.Unlock()
	return nil
}

// step notes a Deliver call starting (+1) or ending (-1).
func (c *Counter) step(d int) {
	now := time.Now()
	c.mu.Lock()
	if !c.last.IsZero() {
		c.area += time.Duration(c.inFlight) * now.Sub(c.last)
	}
	c.inFlight += d
	c.last = now
	c.mu.Unlock()
}

// InFlight is the time integral of the Deliver calls in progress so far:
// its growth over a span, divided by the span, is how many were in
// flight on average.
func (c *Counter) InFlight() time.Duration {
	c.step(0)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.area
}

// Distinct is how many distinct records were delivered.
func (c *Counter) Distinct() int64 { return c.distinct.Load() }

// Successes is how many deliveries succeeded, repeats included.
func (c *Counter) Successes() int64 { return c.successes.Load() }
