package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// centrifugo is one running Centrifugo process, started by this program
// and stopped (by PID) by it.
type centrifugo struct {
	*benchkit.Child
	port   int
	apiKey string
	secret string
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
	child, err := benchkit.StartCentrifugo(bin, dir, name, body)
	if err != nil {
		return nil, fmt.Errorf("cfbench: %w", err)
	}
	return &centrifugo{Child: child, port: port, apiKey: p.APIKey, secret: p.HMACSecret}, nil
}

// stop ends the process by its PID: SIGTERM, then SIGKILL after 5 s.
func (c *centrifugo) stop() {
	if c != nil {
		c.Stop(5 * time.Second)
	}
}

// alive fails if the process has already exited.
func (c *centrifugo) alive() error {
	if c.Alive() {
		return nil
	}
	return fmt.Errorf("cfbench: centrifugo exited (%v); log %s:\n%s", c.WaitErr(), c.LogPath, c.logTail())
}

// logTail is the end of Centrifugo's log.
func (c *centrifugo) logTail() string { return c.LogTail(3000) }

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
	var out struct {
		Offset uint64 `json:"offset"`
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	if err := benchkit.CentrifugoAPI(ctx, hc, c.baseURL(), c.apiKey, "history", map[string]any{"channel": channel, "limit": 0}, &out); err != nil {
		return 0, fmt.Errorf("cfbench: %w", err)
	}
	return out.Offset, nil
}

// cpu is CPU time (user + system) read from /proc/<pid>/stat.
func (c *centrifugo) cpu() time.Duration {
	d, _ := benchkit.ProcCPU(c.PID)
	return d
}

// pollUntil is benchkit.PollUntil failing with "timed out after
// <timeout>" when timeout passes.
func pollUntil(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	return benchkit.PollUntil(ctx, timeout, interval, fmt.Errorf("timed out after %v", timeout), cond)
}
