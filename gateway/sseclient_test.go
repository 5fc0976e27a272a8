package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/sse"
	"github.com/heraldgw/herald/internal/testclient"
)

// sseEvent is one dispatched block of an SSE stream (fields up to a blank
// line). Blocks holding only a retry field or a comment are reported too.
type sseEvent = testclient.Event

// sseStream reads an SSE response in the background: the shared test
// client, with the reads the gateway's tests make of it.
type sseStream struct {
	*testclient.SSE
	resp   *http.Response
	events <-chan sseEvent
	err    error // why the body ended; valid once events is closed
}

func newSSEStream(resp *http.Response, cancel context.CancelFunc) *sseStream {
	s := &sseStream{resp: resp}
	s.SSE = testclient.NewSSE(resp, cancel, testclient.SSEOptions{OnEnd: func(err error) { s.err = err }})
	s.events = s.Events()
	return s
}

// close ends the stream from the client's side and waits for the reader.
func (s *sseStream) close() { s.Close() }

// next returns the next block, failing the test after timeout or at EOF.
func (s *sseStream) next(t *testing.T, timeout time.Duration) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			t.Fatalf("stream ended: %v", s.err)
		}
		return ev
	case <-time.After(timeout):
		t.Fatalf("no event within %s", timeout)
	}
	return sseEvent{}
}

// nextEvent skips heartbeats and retry-only blocks.
func (s *sseStream) nextEvent(t *testing.T) sseEvent {
	t.Helper()
	for {
		ev := s.next(t, 10*time.Second)
		if ev.Name == "" && ev.Data == "" && !ev.HasID {
			continue
		}
		return ev
	}
}

// publication reads the next event, which must be a publication.
func (s *sseStream) publication(t *testing.T) (sseEvent, fanout.Publication) {
	t.Helper()
	ev := s.nextEvent(t)
	if ev.Name != "" {
		t.Fatalf("want a publication, got event %q data %s", ev.Name, ev.Data)
	}
	if !ev.HasID || ev.ID == "" {
		t.Fatalf("publication without id: %+v", ev)
	}
	p, err := fanout.DecodeEnvelope([]byte(ev.Data))
	if err != nil {
		t.Fatalf("publication data: %v", err)
	}
	return ev, p
}

// subscribed reads the next event, which must be "subscribed".
func (s *sseStream) subscribed(t *testing.T) (sseEvent, sse.SubscribedEvent) {
	t.Helper()
	ev := s.nextEvent(t)
	if ev.Name != "subscribed" {
		t.Fatalf("want subscribed, got %q: %s", ev.Name, ev.Data)
	}
	var d sse.SubscribedEvent
	if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
		t.Fatalf("subscribed data %q: %v", ev.Data, err)
	}
	if !ev.HasID {
		t.Fatalf("subscribed event without id")
	}
	return ev, d
}

// control reads the next event, which must be named name.
func (s *sseStream) control(t *testing.T, name string) sse.DisconnectEvent {
	t.Helper()
	ev := s.nextEvent(t)
	if ev.Name != name {
		t.Fatalf("want event %q, got %q: %s", name, ev.Name, ev.Data)
	}
	var d sse.DisconnectEvent
	if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
		t.Fatalf("%s data %q: %v", name, ev.Data, err)
	}
	return d
}

// waitEOF waits for the server to end the stream.
func (s *sseStream) waitEOF(t *testing.T) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				if s.err != io.EOF && s.err != io.ErrUnexpectedEOF {
					t.Logf("stream ended with %v", s.err)
				}
				return
			}
			if ev.Name != "" || ev.Data != "" {
				t.Fatalf("want the end of the stream, got event %q: %s", ev.Name, ev.Data)
			}
		case <-timeout:
			t.Fatalf("stream did not end")
		}
	}
}
