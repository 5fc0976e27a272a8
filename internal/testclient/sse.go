package testclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ErrEnded is returned by Next once a stream or connection has ended and
// everything read before the end has been taken.
var ErrEnded = errors.New("testclient: the connection ended")

// errClosed is why a stream closed by the test ended.
var errClosed = errors.New("testclient: closed by the client")

// ErrTimeout is returned by Next when nothing came within its timeout.
var ErrTimeout = errors.New("testclient: nothing received in time")

// Event is one block of an SSE stream: the fields up to a blank line.
// Blocks holding only a retry field or only comments are events too, so a
// test sees heartbeats.
type Event struct {
	Name     string // the event field; "" for a message
	ID       string // the id field
	HasID    bool   // whether the block had an id field
	Data     string // the data lines joined with "\n"
	Retry    string // the retry field
	Comments []string
}

// Heartbeat reports whether the block holds only comments.
func (e Event) Heartbeat() bool {
	return len(e.Comments) > 0 && e.Name == "" && !e.HasID && e.Data == "" && e.Retry == ""
}

// SSEOptions configures NewSSE. The zero value is valid.
type SSEOptions struct {
	// Buffer is how many events may wait for the test before the reader
	// stops reading the body. Default 4096.
	Buffer int
	// OnEnd, when set, is called once by the reader with the error that
	// ended the body (io.EOF for a clean end), before Events is closed.
	OnEnd func(error)
}

// SSE reads one text/event-stream response in the background.
type SSE struct {
	Resp   *http.Response
	cancel context.CancelFunc
	events chan Event
	reader
}

// NewSSE starts reading resp's body. cancel, which may be nil, ends the
// request; Close calls it.
func NewSSE(resp *http.Response, cancel context.CancelFunc, o SSEOptions) *SSE {
	n := o.Buffer
	if n <= 0 {
		n = 4096
	}
	if cancel == nil {
		cancel = func() {}
	}
	s := &SSE{Resp: resp, cancel: cancel, events: make(chan Event, n), reader: newReader()}
	go s.read(o.OnEnd)
	return s
}

// OpenSSE sends req with client (http.DefaultClient when nil) under a
// context of its own and, whatever the status, returns the stream; a
// non-200 answer's body is not read as a stream: Body returns it.
func OpenSSE(client *http.Client, req *http.Request, o SSEOptions) (*SSE, error) {
	if client == nil {
		client = http.DefaultClient
	}
	ctx, cancel := context.WithCancel(req.Context())
	resp, err := client.Do(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &StatusError{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
	}
	return NewSSE(resp, cancel, o), nil
}

// StatusError is the answer to a request that did not open a stream.
type StatusError struct {
	Status int
	Header http.Header
	Body   string // the first 4 KiB
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("testclient: status %d: %s", e.Status, e.Body)
}

func (s *SSE) read(onEnd func(error)) {
	// Events closes after Done, so Err is set for a test that saw it close.
	defer close(s.events)
	defer close(s.done)
	br := bufio.NewReaderSize(stallReader{s}, 1<<20)
	var ev Event
	started := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			s.end(onEnd, err)
			return
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if started {
				select {
				case s.events <- ev:
				case <-s.closing:
					s.end(onEnd, errClosed)
					return
				}
			}
			ev, started = Event{}, false
			continue
		}
		started = true
		if c, ok := strings.CutPrefix(line, ":"); ok {
			ev.Comments = append(ev.Comments, strings.TrimSpace(c))
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.Name = value
		case "id":
			ev.ID, ev.HasID = value, true
		case "data":
			if ev.Data != "" {
				ev.Data += "\n"
			}
			ev.Data += value
		case "retry":
			ev.Retry = value
		}
	}
}

// stallReader reads the body, except while the stream is stalled.
type stallReader struct{ s *SSE }

func (r stallReader) Read(p []byte) (int, error) {
	if err := r.s.waitStalled(); err != nil {
		return 0, err
	}
	return r.s.Resp.Body.Read(p)
}

func (s *SSE) end(onEnd func(error), err error) {
	s.err = err
	if onEnd != nil {
		onEnd(err)
	}
}

// Events delivers the blocks in order; it is closed when the body ends.
func (s *SSE) Events() <-chan Event { return s.events }

// Next returns the next block, ErrEnded once the body ended and every
// block was taken, or ErrTimeout after timeout.
func (s *SSE) Next(timeout time.Duration) (Event, error) { return next(s.events, timeout) }

// Close ends the request from the client's side and waits for the
// reader. It may be called more than once.
func (s *SSE) Close() {
	s.close(func() {
		s.cancel()
		_ = s.Resp.Body.Close()
	})
}
