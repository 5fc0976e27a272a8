package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

var (
	sseEvent = []byte("event: ")
	sseData  = []byte("data: ")
)

// sseStream reads the event-stream framing one event at a time.
type sseStream struct {
	br    *bufio.Reader
	event []byte // name of the event being read; empty for a publication
	long  []byte // a line longer than the buffer, assembled
}

// line returns the next line without its newline; valid until the next
// call.
func (st *sseStream) line() ([]byte, error) {
	l, err := st.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		st.long = append(st.long[:0], l...)
		for errors.Is(err, bufio.ErrBufferFull) {
			l, err = st.br.ReadSlice('\n')
			st.long = append(st.long, l...)
		}
		l = st.long
	}
	if err != nil {
		return nil, err
	}
	return bytes.TrimRight(l, "\r\n"), nil
}

// next returns the next event's name and data line. Comments (": ping"),
// id: and retry: lines are skipped; Herald sends one data line per event,
// after the event: and id: lines, so the data is handed back as soon as it
// is read (the receive time is taken then).
func (st *sseStream) next() (event, data []byte, err error) {
	st.event = st.event[:0]
	for {
		l, err := st.line()
		if err != nil {
			return nil, nil, err
		}
		switch {
		case len(l) == 0:
			st.event = st.event[:0] // an event without data: nothing to hand back
		case bytes.HasPrefix(l, sseEvent):
			st.event = append(st.event[:0], l[len(sseEvent):]...)
		case bytes.HasPrefix(l, sseData):
			return st.event, l[len(sseData):], nil
		}
	}
}

// openSSE opens subscriber s as GET /v1/sse?channel=… with its own token
// and waits for the subscribed event. Its reader then runs until the
// stream ends.
func (r *runner) openSSE(ctx context.Context, s *subscriber) error {
	ch := r.channelName(s.channel)
	token, err := r.subscriberToken(s.idx, ch)
	if err != nil {
		return err
	}
	// The stream lives past the connect phase: its request has the run's
	// context, and the connect deadline is applied by hand below.
	var resp *http.Response
	err = withRetry(ctx, &r.retries, &r.retryMu, func() error {
		req, err := http.NewRequestWithContext(r.streamCtx, http.MethodGet, r.tgt.base+"/v1/sse?channel="+url.QueryEscape(ch), nil)
		if err != nil {
			return fmt.Errorf("connbench: sse request: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "text/event-stream")
		res, err := r.client(s).Do(req)
		if err != nil {
			return fmt.Errorf("connbench: sse: %w", err)
		}
		if res.StatusCode != http.StatusOK {
			defer res.Body.Close()
			return refusal(res)
		}
		resp = res
		return nil
	})
	if err != nil {
		return err
	}
	st := &sseStream{br: bufio.NewReaderSize(resp.Body, 4096)}
	stop := context.AfterFunc(ctx, func() { resp.Body.Close() })
	event, data, err := st.next()
	stopped := stop()
	if err == nil && !stopped {
		err = ctx.Err()
	}
	if err != nil {
		resp.Body.Close()
		return fmt.Errorf("connbench: subscriber %d: sse: waiting for subscribed: %w", s.idx, err)
	}
	if string(event) != "subscribed" {
		resp.Body.Close()
		return fmt.Errorf("connbench: subscriber %d: sse: first event %q, want subscribed: %s", s.idx, event, data)
	}
	if err := json.Unmarshal(data, &s.start); err != nil {
		resp.Body.Close()
		return fmt.Errorf("connbench: subscriber %d: sse: subscribed %s: %w", s.idx, data, err)
	}
	r.track(func() { resp.Body.Close() })
	r.readers.Go(func() { r.readSSE(resp.Body, st, s) })
	return nil
}

// readSSE reads subscriber s's stream until it ends.
func (r *runner) readSSE(body io.Closer, st *sseStream, s *subscriber) {
	defer body.Close()
	if s.stalled {
		<-r.resume
	}
	var announced string
	for {
		event, data, err := st.next()
		if err != nil {
			seen := "eof"
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				seen = "error"
			}
			s.finish(r.endReason(announced, seen))
			return
		}
		recv := time.Now()
		switch string(event) {
		case "":
			if p, ok := pubFields(data); ok {
				r.received(s, p, recv)
			}
		case "disconnect":
			var d struct {
				Reason string `json:"reason"`
			}
			if json.Unmarshal(data, &d) == nil {
				announced = d.Reason
			}
		case "unsubscribed":
			s.unsub++
		}
	}
}
