package main

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testclient"
)

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	Event string
	ID    string
	Data  string
}

// sseStream is an open SSE response read by the shared test client.
type sseStream struct {
	Status int
	Body   string // error body when Status != 200
	// Subscribed is the data of the subscribed event subscribeSSE waited
	// for.
	Subscribed string
	sse        *testclient.SSE
}

// openSSE opens url with the bearer token and, on 200, reads events.
func openSSE(t *testing.T, url, token, lastEventID string) *sseStream {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	sse, err := testclient.OpenSSE(nil, req, testclient.SSEOptions{})
	var refused *testclient.StatusError
	if errors.As(err, &refused) {
		return &sseStream{Status: refused.Status, Body: refused.Body}
	}
	if err != nil {
		t.Fatalf("open SSE: %v", err)
	}
	t.Cleanup(sse.Close)
	return &sseStream{Status: http.StatusOK, sse: sse}
}

// subscribeSSE opens url as openSSE does and fails the test unless the
// server answers 200 and its first event is "subscribed" (whose data is
// then in Subscribed).
func subscribeSSE(t *testing.T, url, token, lastEventID string) *sseStream {
	t.Helper()
	s := openSSE(t, url, token, lastEventID)
	if s.Status != http.StatusOK {
		t.Fatalf("SSE %s: %d %s", url, s.Status, s.Body)
	}
	ev := s.next(t, 10*time.Second)
	if ev.Event != "subscribed" {
		t.Fatalf("SSE %s: first event %q %s, want subscribed", url, ev.Event, ev.Data)
	}
	s.Subscribed = ev.Data
	return s
}

// Close ends the stream and waits for its reader.
func (s *sseStream) Close() {
	if s.sse != nil {
		s.sse.Close()
	}
}

// next returns the next event with a name or data (skipping the retry
// field and heartbeats), failing after d.
func (s *sseStream) next(t *testing.T, d time.Duration) sseEvent {
	t.Helper()
	if s.sse == nil {
		t.Fatalf("SSE request refused: %d %s", s.Status, s.Body)
	}
	deadline := time.Now().Add(d)
	for {
		ev, err := s.sse.Next(time.Until(deadline))
		if err != nil {
			t.Fatalf("SSE stream: %v", err)
		}
		if ev.Name != "" || ev.Data != "" {
			return sseEvent{Event: ev.Name, ID: ev.ID, Data: ev.Data}
		}
	}
}

// nextPublication skips control events and decodes the next publication.
func (s *sseStream) nextPublication(t *testing.T, d time.Duration) (fanout.Publication, string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ev := s.next(t, time.Until(deadline))
		if ev.Event != "" {
			continue
		}
		e, err := fanout.DecodeEnvelope([]byte(ev.Data))
		if err != nil {
			t.Fatalf("publication is not an envelope: %v: %s", err, ev.Data)
		}
		return e, ev.ID
	}
}

// expectNextMarker stages a marker record on tenant's channel and fails
// unless it is the stream's next publication, at offset: whatever the
// test expects never to come would have come before it. An event to wait
// for, not a window of silence a busy machine could outlast.
func (s *sseStream) expectNextMarker(t *testing.T, st stager, tenant, channel string, offset uint64) {
	t.Helper()
	id := st.stage(t, notification(tenant, channel, `{"marker":true}`), true)
	e, _ := s.nextPublication(t, 10*time.Second)
	if e.ID != id || e.Offset != offset {
		t.Fatalf("next publication %s at offset %d, want the marker %s at offset %d: something came before it", e.ID, e.Offset, id, offset)
	}
}
