package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	Event string
	ID    string
	Data  string
}

// envelope is the publication envelope as a client sees it.
type envelope struct {
	ID            string          `json:"id"`
	Channel       string          `json:"channel"`
	Offset        uint64          `json:"offset"`
	Epoch         string          `json:"epoch"`
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schema_version"`
	Time          time.Time       `json:"time"`
	Freshness     json.RawMessage `json:"freshness"`
	Data          json.RawMessage `json:"data"`
}

// sseStream is an open SSE response read by a goroutine.
type sseStream struct {
	Status int
	Body   string // error body when Status != 200
	events chan sseEvent
	cancel context.CancelFunc
	done   chan struct{}
}

// openSSE opens url with the bearer token and, on 200, reads events.
func openSSE(t *testing.T, url, token, lastEventID string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("open SSE: %v", err)
	}
	s := &sseStream{Status: resp.StatusCode, events: make(chan sseEvent, 1024), cancel: cancel, done: make(chan struct{})}
	if resp.StatusCode != http.StatusOK {
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		s.Body = b.String()
		resp.Body.Close()
		cancel()
		close(s.done)
		close(s.events)
		return s
	}
	go func() {
		defer close(s.done)
		defer close(s.events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var ev sseEvent
		var data []string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if len(data) > 0 || ev.Event != "" {
					ev.Data = strings.Join(data, "\n")
					s.events <- ev
				}
				ev, data = sseEvent{}, nil
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "event:"):
				ev.Event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "id:"):
				ev.ID = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
			case strings.HasPrefix(line, "data:"):
				data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			}
		}
	}()
	t.Cleanup(s.Close)
	return s
}

// Close ends the stream and waits for its reader.
func (s *sseStream) Close() {
	s.cancel()
	<-s.done
}

// next returns the next event, failing after d.
func (s *sseStream) next(t *testing.T, d time.Duration) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			t.Fatalf("SSE stream ended")
		}
		return ev
	case <-time.After(d):
		t.Fatalf("no SSE event within %v", d)
	}
	return sseEvent{}
}

// nextPublication skips control events and decodes the next publication.
func (s *sseStream) nextPublication(t *testing.T, d time.Duration) (envelope, string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ev := s.next(t, time.Until(deadline))
		if ev.Event != "" {
			continue
		}
		var e envelope
		if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
			t.Fatalf("publication is not an envelope: %v: %s", err, ev.Data)
		}
		return e, ev.ID
	}
}

// expectQuiet fails if a publication arrives within d.
func (s *sseStream) expectQuiet(t *testing.T, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return
			}
			if ev.Event == "" {
				t.Fatalf("unexpected publication: %s", ev.Data)
			}
		case <-timer.C:
			return
		}
	}
}
