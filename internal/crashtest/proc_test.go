package crashtest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
)

// outputBuffer collects a process's output and wakes waiters on each write.
type outputBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newOutputBuffer() *outputBuffer { return &outputBuffer{changed: make(chan struct{})} }

func (b *outputBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	close(b.changed)
	b.changed = make(chan struct{})
	return n, err
}

// snapshot returns the output so far and a channel closed on the next write.
func (b *outputBuffer) snapshot() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String(), b.changed
}

func (b *outputBuffer) String() string {
	s, _ := b.snapshot()
	return s
}

// tail is the last n lines of the output.
func (b *outputBuffer) tail(n int) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// proc is one herald process in its own process group.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout *outputBuffer
	stderr *outputBuffer
	done   chan struct{} // closed once the process was reaped
	err    error         // Wait's result, valid after done
}

// startHerald starts `herald <args…>` in a new process group. The group is
// killed with SIGKILL when t ends; on failure its output tail is logged.
func startHerald(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, stdout: newOutputBuffer(), stderr: newOutputBuffer(), done: make(chan struct{})}
	p.cmd = exec.Command(heraldBin, args...)
	p.cmd.Env = testenv.HeraldEnv()
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("%s stdout:\n%s\n%s stderr (tail):\n%s", name, p.stdout.tail(20), name, p.stderr.tail(60))
		}
	})
	return p
}

// kill sends SIGKILL to the process group and waits (bounded) until the
// process has been reaped.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		t.Errorf("kill %s (pgid %d): %v", p.name, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Errorf("%s (pid %d) did not exit within 10s of SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// signal sends sig to the process group.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		t.Fatalf("signal %v to %s (pgid %d): %v", sig, p.name, p.cmd.Process.Pid, err)
	}
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// waitStdout waits until stdout matches re and returns the submatches.
func (p *proc) waitStdout(t *testing.T, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		out, changed := p.stdout.snapshot()
		if m := re.FindStringSubmatch(out); m != nil {
			return m
		}
		select {
		case <-changed:
		case <-p.done:
			if m := re.FindStringSubmatch(p.stdout.String()); m != nil {
				return m
			}
			t.Fatalf("%s exited (%v) before printing %q; stderr:\n%s", p.name, p.err, re, p.stderr.tail(40))
		case <-deadline.C:
			t.Fatalf("%s printed no line matching %q within %v; stdout:\n%s\nstderr:\n%s",
				p.name, re, timeout, p.stdout.tail(10), p.stderr.tail(40))
		}
	}
}

// runHerald runs a short herald command to completion and returns stdout.
func runHerald(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, heraldBin, args...)
	cmd.Env = testenv.HeraldEnv()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("herald %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(redactArgs(args), " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// redactArgs hides secret values in logged command lines.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if i > 0 && args[i-1] == "--jwt-hmac-secret" {
			out[i] = "(secret)"
		}
	}
	return out
}

// waitUntil polls cond every interval until it returns true, failing the
// test after timeout with what.
func waitUntil(t *testing.T, timeout, interval time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("timed out after %v waiting for %s", timeout, what)
			if lastErr != nil {
				msg += ": last error: " + lastErr.Error()
			}
			t.Fatal(msg)
		}
		<-tick.C
	}
}
