package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
)

// startBinary starts bin with args (a clean environment) and returns the
// process and the file its stdout goes to; the test kills it at the end if
// it still runs.
func startBinary(t *testing.T, bin string, args ...string) (*exec.Cmd, *bgProc, *testenv.SyncBuffer) {
	t.Helper()
	return spawn(t, "", bin, "herald", false, args...)
}

// spawn starts bin with args in dir ("": here) with a clean environment,
// its stdout going to a file, as the process line names it (name and
// args). When the test ends it is sent SIGTERM and, still running 30s
// later, killed (an error); with clean, exiting otherwise than cleanly is
// an error too.
func spawn(t *testing.T, dir, bin, name string, clean bool, args ...string) (*exec.Cmd, *bgProc, *testenv.SyncBuffer) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "stdout")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stderr testenv.SyncBuffer
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, testenv.HeraldEnv(), f, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &bgProc{line: name + " " + strings.Join(args, " "), out: out, pid: cmd.Process.Pid}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if clean && err != nil {
				t.Errorf("%s: %v\n%s", p.line, err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("%s did not stop within 30s of SIGTERM", p.line)
		}
	})
	return cmd, p, &stderr
}

// runBinary runs bin with args to the end.
func runBinary(t *testing.T, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = testenv.HeraldEnv(), &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errOut.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errOut.String()
}

// TestSQLiteDataDirLock, with real processes: a herald serve on the
// embedded store locks its data directory; a second serve and a feed on
// it are refused, naming the first one's PID and the way out; publish
// (a producer) still stages there. The lock dies with its process, even
// killed: the next serve starts.
func TestSQLiteDataDirLock(t *testing.T) {
	bin := buildHerald(t)
	data := filepath.Join(t.TempDir(), "data")
	first, firstOut, firstErr := startBinary(t, bin, "serve", "--listen", "127.0.0.1:0", "--data-dir", data)
	base, _ := waitListening(t, firstOut)
	waitReady(t, base)
	pid := strconv.Itoa(first.Process.Pid)

	for _, args := range [][]string{
		{"serve", "--listen", "127.0.0.1:0", "--data-dir", data},
		{"feed", "--listen", "", "--data-dir", data},
	} {
		code, out, errOut := runBinary(t, bin, args...)
		if code != 1 || strings.Contains(out, "listening") {
			t.Fatalf("herald %s beside a running serve: exit %d, stdout %q, stderr %q; want it refused", strings.Join(args, " "), code, out, errOut)
		}
		abs, _ := filepath.Abs(data)
		for _, want := range []string{"data directory " + abs + " is in use", "herald process " + pid, "runs the outbox Worker",
			"another --data-dir", "PostgreSQL (--database-url) and Redis (--redis-url)"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("herald %s: stderr lacks %q:\n%s", args[0], want, errOut)
			}
		}
	}

	// A producer is no consumer: it stages beside the node, which
	// delivers, and publish has nothing to warn about.
	tok := strings.TrimSpace(mustRun(t, bin, "token", "--data-dir", data, "--tenant", "acme", "--sub", "u1", "--subscribe", "orders/*"))
	s := subscribeSSE(t, base+"/v1/sse?channel=orders/1", tok, "")
	code, out, errOut := runBinary(t, bin, "publish", "--data-dir", data, "--tenant", "acme", "--channel", "orders/1", "--type", "order.updated", "--data", `{"n":1}`)
	if code != 0 || strings.Contains(errOut, "no herald serve or feed consumes") {
		t.Fatalf("publish beside the node: exit %d, %q, %s", code, out, errOut)
	}
	if e, _ := s.nextPublication(t, 30*time.Second); e.ID != strings.TrimSpace(out) {
		t.Fatalf("got %+v, want id %s", e, out)
	}

	// Killed, the holder leaves its PID in the file but no lock.
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, first.Process.Pid)
	code, _, errOut = runBinary(t, bin, "publish", "--data-dir", data, "--tenant", "acme", "--channel", "orders/1", "--type", "order.updated", "--data", `{"n":2}`)
	if code != 0 || !strings.Contains(errOut, "no herald serve or feed consumes this outbox now") {
		t.Errorf("publish with no node running: exit %d, stderr %q; want a warning", code, errOut)
	}
	_, nextOut, _ := startBinary(t, bin, "serve", "--listen", "127.0.0.1:0", "--data-dir", data)
	waitReady(t, mustListen(t, nextOut))
	if t.Failed() {
		t.Logf("first serve's stderr:\n%s", firstErr.String())
	}
}

func mustListen(t *testing.T, p *bgProc) string {
	t.Helper()
	base, _ := waitListening(t, p)
	return base
}

func mustRun(t *testing.T, bin string, args ...string) string {
	t.Helper()
	code, out, errOut := runBinary(t, bin, args...)
	if code != 0 {
		t.Fatalf("herald %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// waitGone waits until process pid has exited and been reaped.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a failure bound, not a budget
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs 1m after SIGKILL", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
