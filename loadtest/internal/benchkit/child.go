package benchkit

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Child is a server process a load test started: reaped in the
// background, its output in a log file, stopped by its PID.
type Child struct {
	Cmd     *exec.Cmd
	PID     int
	LogPath string
	// Started is when the process was started.
	Started time.Time

	exited  chan struct{}
	waitErr error
}

// StartChild starts cmd with its standard error, and its standard output
// unless stdout is given, written to a new file at logPath. With stdout,
// the function reads the process's standard output (what it leaves
// unread is discarded) until the process ends. The kernel kills the
// process (SIGKILL) if this one dies before stopping it; cmd.SysProcAttr
// may set more (a process group of its own, say).
func StartChild(cmd *exec.Cmd, logPath string, stdout func(io.Reader)) (*Child, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("child log: %w", err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd.Stderr = logFile
	var out io.ReadCloser
	if stdout == nil {
		cmd.Stdout = logFile
	} else if out, err = cmd.StdoutPipe(); err != nil {
		return nil, fmt.Errorf("child stdout: %w", err)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	c := &Child{Cmd: cmd, LogPath: logPath, Started: time.Now(), exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	c.PID = cmd.Process.Pid
	go func() {
		if out != nil {
			// Wait only after every read.
			stdout(out)
			_, _ = io.Copy(io.Discard, out)
		}
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// Exited is closed once the process has ended and been reaped.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// WaitErr is how the process ended (cmd.Wait's error) once Exited is
// closed; nil while it runs.
func (c *Child) WaitErr() error {
	if c.Alive() {
		return nil
	}
	return c.waitErr
}

// Alive reports whether the process is still running.
func (c *Child) Alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// Stop sends the process SIGTERM and waits until it has ended, killing it
// (SIGKILL) after grace. It does nothing when the process has already
// ended, so it may be called twice.
func (c *Child) Stop(grace time.Duration) {
	if !c.Alive() {
		return
	}
	_ = c.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(grace):
		_ = c.Cmd.Process.Kill()
		<-c.exited
	}
}

// LogTail is the last n bytes of the log, for error messages.
func (c *Child) LogTail(n int) string {
	b, err := os.ReadFile(c.LogPath)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// ErrorLines counts the lines at level error of a JSON log (Centrifugo's,
// where its outbox consumer reports a failed batch); -1 when the log
// cannot be read.
func (c *Child) ErrorLines() int {
	b, err := os.ReadFile(c.LogPath)
	if err != nil {
		return -1
	}
	return bytes.Count(b, []byte(`"level":"error"`))
}

// StartCentrifugo writes config (Centrifugo's JSON config) to
// dir/name.json and starts bin with it in dir, its output in dir/name.log.
// The process has a process group of its own: a terminal's Ctrl-C reaches
// only the benchmark, which stops it.
func StartCentrifugo(bin, dir, name string, config []byte) (*Child, error) {
	cfgPath := filepath.Join(dir, name+".json")
	if err := os.WriteFile(cfgPath, config, 0o600); err != nil {
		return nil, fmt.Errorf("centrifugo config: %w", err)
	}
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return StartChild(cmd, filepath.Join(dir, name+".log"), nil)
}
