package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// centrifugo is one running Centrifugo process, started by this program
// and stopped (by PID) by it.
type centrifugo struct {
	cmd     *exec.Cmd
	pid     int
	port    int
	apiKey  string
	secret  string
	logPath string
	started time.Time
	exited  chan struct{} // closed when the process has been reaped
	waitErr error
}

// startCentrifugo writes a config for p into dir (name is a label for
// the files) and starts bin with it. The port, API key and HMAC secret
// are filled in here.
func startCentrifugo(bin, dir, name string, p cfParams) (*centrifugo, error) {
	port, err := benchkit.FreePort()
	if err != nil {
		return nil, err
	}
	p.Port = port
	p.APIKey, p.HMACSecret = benchkit.RandomHex(16), benchkit.RandomHex(32)
	body, err := renderConfig(p)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, name+".json")
	if err := os.WriteFile(cfgPath, body, 0o600); err != nil {
		return nil, fmt.Errorf("cfbench: write centrifugo config: %w", err)
	}
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("cfbench: centrifugo log: %w", err)
	}
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, and SIGKILL if this program dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	c := &centrifugo{cmd: cmd, port: port, apiKey: p.APIKey, secret: p.HMACSecret, logPath: logPath, exited: make(chan struct{})}
	c.started = time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("cfbench: start %s: %w", bin, err)
	}
	c.pid = cmd.Process.Pid
	go func() {
		c.waitErr = cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	return c, nil
}

// stop ends the process by its PID: SIGTERM, then SIGKILL after 5 s.
func (c *centrifugo) stop() {
	if c == nil {
		return
	}
	select {
	case <-c.exited:
		return
	default:
	}
	_ = syscall.Kill(c.pid, syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(c.pid, syscall.SIGKILL)
		<-c.exited
	}
}

// alive fails if the process has already exited.
func (c *centrifugo) alive() error {
	select {
	case <-c.exited:
		return fmt.Errorf("cfbench: centrifugo exited (%v); log %s:\n%s", c.waitErr, c.logPath, c.logTail())
	default:
		return nil
	}
}

// logTail is the end of Centrifugo's log.
func (c *centrifugo) logTail() string {
	b, _ := os.ReadFile(c.logPath)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// errorLines counts log lines at level error (consumer failures show up
// there).
func (c *centrifugo) errorLines() int {
	b, _ := os.ReadFile(c.logPath)
	return bytes.Count(b, []byte(`"level":"error"`))
}

func (c *centrifugo) baseURL() string { return "http://127.0.0.1:" + strconv.Itoa(c.port) }

// waitHealthy waits until /health answers 200.
func (c *centrifugo) waitHealthy(ctx context.Context, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	return pollUntil(ctx, timeout, 20*time.Millisecond, func() (bool, error) {
		if err := c.alive(); err != nil {
			return false, err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL()+"/health", nil)
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// historyOffset asks the server API for channel's stream top offset: how
// many publications Centrifugo made to it.
func (c *centrifugo) historyOffset(ctx context.Context, channel string) (uint64, error) {
	body, _ := json.Marshal(map[string]any{"channel": channel, "limit": 0})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL()+"/api/history", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-API-Key", c.apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, fmt.Errorf("cfbench: history API: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var out struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Result struct {
			Offset uint64 `json:"offset"`
		} `json:"result"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil {
		return 0, fmt.Errorf("cfbench: history API: %s: %s", resp.Status, b)
	}
	if out.Error != nil {
		return 0, fmt.Errorf("cfbench: history API: %d %s", out.Error.Code, out.Error.Message)
	}
	return out.Result.Offset, nil
}

// cpu is CPU time (user + system) read from /proc/<pid>/stat.
func (c *centrifugo) cpu() time.Duration {
	d, _ := benchkit.ProcCPU(c.pid)
	return d
}

// pollUntil is benchkit.PollUntil failing with "timed out after
// <timeout>" when timeout passes.
func pollUntil(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	return benchkit.PollUntil(ctx, timeout, interval, fmt.Errorf("timed out after %v", timeout), cond)
}
