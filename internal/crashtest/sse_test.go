package crashtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// plainHTTP makes one-off requests without keeping connections (and their
// goroutines) alive after the response.
var plainHTTP = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// httpStatus returns the status code of GET url.
func httpStatus(url string) (int, error) {
	resp, err := plainHTTP.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// sseClient reads one SSE stream and counts the publications per id.
type sseClient struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	seen       map[string]int // publication id → deliveries
	events     int
	subscribed int
	ended      error // why the stream ended, once it did
}

// openSSE opens GET /v1/sse for channels with a bearer token and reads it
// in the background until t ends.
func openSSE(t *testing.T, base, token string, channels []string) *sseClient {
	t.Helper()
	q := url.Values{}
	for _, ch := range channels {
		q.Add("channel", ch)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/sse?"+q.Encode(), nil)
	if err != nil {
		cancel()
		t.Fatalf("sse request: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	tr := &http.Transport{ResponseHeaderTimeout: 10 * time.Second, DisableKeepAlives: true}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		cancel()
		t.Fatalf("open sse stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		t.Fatalf("open sse stream: %s", resp.Status)
	}
	c := &sseClient{cancel: cancel, done: make(chan struct{}), seen: map[string]int{}}
	go func() {
		defer close(c.done)
		defer resp.Body.Close()
		err := c.read(resp)
		c.mu.Lock()
		c.ended = err
		c.mu.Unlock()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Error("sse reader did not stop within 10s")
		}
		tr.CloseIdleConnections()
	})
	return c
}

// read parses events until the stream ends.
func (c *sseClient) read(resp *http.Response) error {
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var event, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if err := c.dispatch(event, data); err != nil {
				return err
			}
			event, data = "", ""
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("stream closed by the server")
}

// dispatch handles one complete event.
func (c *sseClient) dispatch(event, data string) error {
	if data == "" {
		return nil // a retry line or a heartbeat
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch event {
	case "":
		p, err := fanout.DecodeEnvelope([]byte(data))
		if err != nil {
			return err
		}
		c.seen[p.ID]++
		c.events++
	case "subscribed":
		c.subscribed++
	case "disconnect", "reauth":
		return fmt.Errorf("server sent %s: %s", event, data)
	}
	return nil
}

// state returns the deliveries so far and why the stream ended (nil while
// it runs).
func (c *sseClient) state() (subscribed, events, distinct int, ended error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subscribed, c.events, len(c.seen), c.ended
}

// delivered reports how many times id was delivered.
func (c *sseClient) delivered(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[id]
}
