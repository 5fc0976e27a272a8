package crashtest

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testclient"
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
	done chan struct{} // closed when every event has been counted

	mu         sync.Mutex
	seen       map[string]int       // publication id → deliveries
	firstAt    map[string]time.Time // publication id → when it first arrived
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
	req, err := http.NewRequest(http.MethodGet, base+"/v1/sse?"+q.Encode(), nil)
	if err != nil {
		t.Fatalf("sse request: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	tr := &http.Transport{ResponseHeaderTimeout: 10 * time.Second, DisableKeepAlives: true}
	stream, err := testclient.OpenSSE(&http.Client{Transport: tr}, req, testclient.SSEOptions{})
	if err != nil {
		t.Fatalf("open sse stream: %v", err)
	}
	c := &sseClient{done: make(chan struct{}), seen: map[string]int{}, firstAt: map[string]time.Time{}}
	go func() {
		defer close(c.done)
		err := c.count(stream.Events())
		stream.Close()
		if err == nil {
			err = errors.New("stream closed by the server")
		}
		c.mu.Lock()
		c.ended = err
		c.mu.Unlock()
	}()
	t.Cleanup(func() {
		stream.Close()
		<-c.done
		tr.CloseIdleConnections()
	})
	return c
}

// count counts the events until the stream ends or one of them ends the
// test's interest (a disconnect, a reauth, a publication that is not an
// envelope).
func (c *sseClient) count(events <-chan testclient.Event) error {
	for ev := range events {
		if err := c.dispatch(ev.Name, ev.Data); err != nil {
			return err
		}
	}
	return nil
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
		if c.seen[p.ID] == 0 {
			c.firstAt[p.ID] = time.Now()
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

// arrivedAt returns when id was first delivered.
func (c *sseClient) arrivedAt(id string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.firstAt[id]
	return at, ok
}
