package benchkit

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestChildLogAndStop(t *testing.T) {
	dir := t.TempDir()
	// The shell answers SIGTERM by exiting 3, after both lines are out.
	cmd := exec.Command("sh", "-c", `trap 'exit 3' TERM; echo '{"level":"error","msg":"a"}'; echo '{"level":"warn"}' >&2; while :; do sleep 0.05; done`)
	c, err := StartChild(cmd, filepath.Join(dir, "child.log"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.PID != cmd.Process.Pid || c.Started.IsZero() {
		t.Fatalf("PID %d (process %d), Started %v", c.PID, cmd.Process.Pid, c.Started)
	}
	err = PollUntil(context.Background(), 10*time.Second, 10*time.Millisecond, nil, func() (bool, error) {
		return strings.Count(c.LogTail(1000), "\n") == 2, nil
	})
	if err != nil {
		t.Fatalf("both lines in the log: %v; log %q", err, c.LogTail(1000))
	}
	if n := c.ErrorLines(); n != 1 {
		t.Errorf("ErrorLines = %d, want 1", n)
	}
	if got := c.LogTail(5); got != "rn\"}\n" && got != "\"a\"}\n" {
		t.Errorf("LogTail(5) = %q: not the log's last 5 bytes", got)
	}
	if !c.Alive() || c.WaitErr() != nil {
		t.Fatalf("running: Alive %v, WaitErr %v", c.Alive(), c.WaitErr())
	}
	c.Stop(10 * time.Second)
	if c.Alive() {
		t.Fatal("Alive after Stop")
	}
	var ee *exec.ExitError
	if err := c.WaitErr(); err == nil || !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("WaitErr = %v, want exit status 3 (SIGTERM reached the shell)", err)
	}
	c.Stop(time.Second) // a second Stop does nothing
	if n := (&Child{LogPath: filepath.Join(dir, "none.log")}).ErrorLines(); n != -1 {
		t.Errorf("ErrorLines of a missing log = %d, want -1", n)
	}
}

func TestChildStdout(t *testing.T) {
	cmd := exec.Command("sh", "-c", `echo listening on here; echo more; echo to-log >&2`)
	lines := make(chan string, 1)
	c, err := StartChild(cmd, filepath.Join(t.TempDir(), "child.log"), func(r io.Reader) {
		sc := bufio.NewScanner(r)
		sc.Scan()
		lines <- sc.Text() // what is left is drained by StartChild
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-lines; got != "listening on here" {
		t.Errorf("first stdout line %q", got)
	}
	<-c.Exited()
	if err := c.WaitErr(); err != nil {
		t.Fatalf("WaitErr = %v", err)
	}
	if got := c.LogTail(100); got != "to-log\n" {
		t.Errorf("log %q, want only standard error", got)
	}
}
