package sse

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
)

// batchBytes is the size at which a sink hands what it buffered to its
// out even though more is to come.
const batchBytes = 64 << 10

// Sink writes the SSE framing (text/event-stream) of a connection. It
// builds events in a pooled buffer, held only until the next flush, and
// hands them to its out in batches. Only the writer calls it, except kill.
type Sink struct {
	out     Out
	timeout time.Duration // WriteTimeout, per batch
	enc     CursorEncoder
	buf     []byte  // events not yet handed to out, after Room free bytes; nil after a flush
	bufp    *[]byte // the pooled slice buf came from
	// direct is set from Direct to TryFlush: the event is sent without
	// blocking, however large, so it is not handed to out before.
	direct bool

	mu sync.Mutex // guards out against kill
}

var _ session.DirectSink = (*Sink)(nil)

func NewSink(out Out, timeout time.Duration) *Sink {
	return &Sink{out: out, timeout: timeout}
}

// setOut replaces the out (once the stream left net/http); the writer
// must not run.
func (s *Sink) setOut(out Out) {
	s.mu.Lock()
	s.out = out
	s.mu.Unlock()
}

// Arm sets the deadline of the batch that follows.
func (s *Sink) Arm() error {
	s.direct = false
	return s.out.SetDeadline(time.Now().Add(s.timeout))
}

func (s *Sink) SetDeadline(t time.Time) error { return s.out.SetDeadline(t) }

// open returns the buffer to append an event to.
func (s *Sink) open() []byte {
	if s.buf == nil {
		s.bufp = session.GetBatchBuf()
		s.buf = append((*s.bufp)[:0], make([]byte, Room)...)
	}
	return s.buf
}

// done takes back the buffer with one more event in it, and hands the
// batch to the out once it is large.
func (s *Sink) done(b []byte) error {
	s.buf = b
	if len(b) < Room+batchBytes || s.direct {
		return nil
	}
	err := s.out.Write(b)
	s.buf = b[:Room]
	return err
}

// Publication writes "id: <cursor>\ndata: <envelope>\n\n": no event field,
// so EventSource.onmessage receives it. The envelope bytes are the shared
// encoding of the publication, copied as they are; the cursor is encoded
// into the batch buffer.
func (s *Sink) Publication(p *fanout.Prepared, pos *session.Positions) error {
	b := append(s.open(), "id: "...)
	b = s.enc.appendText(b, pos.Entries)
	b = append(b, "\ndata: "...)
	b = append(b, p.JSON()...)
	b = append(b, "\n\n"...)
	return s.done(b)
}

var pingFrame = []byte(": ping\n\n")

func (s *Sink) Heartbeat() error { return s.done(append(s.open(), pingFrame...)) }

// Retry writes the reconnection delay field.
func (s *Sink) Retry(d time.Duration) error {
	b := append(s.open(), "retry: "...)
	b = strconv.AppendInt(b, d.Milliseconds(), 10)
	return s.done(append(b, "\n\n"...))
}

// SubscribedEvent is the data of a "subscribed" event.
type SubscribedEvent struct {
	Channel   string `json:"channel"`
	Recovered bool   `json:"recovered"`
	Reason    string `json:"reason,omitempty"` // why not recovered
	Offset    uint64 `json:"offset"`
	Epoch     string `json:"epoch"`
}

// Subscribed writes a "subscribed" event carrying the stream's cursor as
// its id, so a client that sees no publication still resumes from here. A
// stream makes no subscribe requests: id is 0.
func (s *Sink) Subscribed(_ uint64, sub session.Subscription, pos *session.Positions) error {
	data, err := json.Marshal(SubscribedEvent{
		Channel: sub.Channel, Recovered: sub.Recovered, Reason: sub.Why.Code, Offset: sub.Top.Offset, Epoch: sub.Top.Epoch,
	})
	if err != nil {
		return err
	}
	b := append(s.open(), "event: subscribed\nid: "...)
	return s.event(s.enc.appendText(b, pos.Entries), data)
}

// DisconnectEvent is the data of "disconnect" (and "reauth") events.
type DisconnectEvent struct {
	Reason    string `json:"reason"`
	Reconnect bool   `json:"reconnect"`
	DelayMS   int64  `json:"delay_ms"`
	Message   string `json:"message,omitempty"`
	// ExpiresAt is the token's exp in Unix seconds, in a reauth event sent
	// ahead of expiry.
	ExpiresAt int64 `json:"expires_at,omitempty"`
}

// UnsubscribedEvent is the data of an "unsubscribed" event: the server
// ended one channel of the stream, the others go on.
type UnsubscribedEvent struct {
	Channel     string `json:"channel"`
	Reason      string `json:"reason"`
	Resubscribe bool   `json:"resubscribe"`
	Message     string `json:"message,omitempty"`
}

// reauthMessage tells an SSE client what to do on reauth.
const reauthMessage = "the token expires soon: fetch a fresh token (or ticket) and open a new stream with last_event_id"

// RefreshRequest writes a "reauth" event ahead of the token's expiry; the
// stream goes on until the server closes it, before exp.
func (s *Sink) RefreshRequest(exp time.Time) error {
	data, err := json.Marshal(DisconnectEvent{
		Reason: session.ReasonTokenExpired.Code, Reconnect: true, Message: reauthMessage, ExpiresAt: exp.Unix(),
	})
	if err != nil {
		return err
	}
	return s.event(append(s.open(), "event: reauth"...), data)
}

// SubscribeFailed writes nothing: a stream makes no subscribe requests.
func (s *Sink) SubscribeFailed(uint64, string, session.Reason) error { return nil }

// Unsubscribed writes an "unsubscribed" event carrying the cursor of the
// channels left, so a reconnect resumes them. Only the server ends a
// stream's subscriptions: id is 0.
func (s *Sink) Unsubscribed(_ uint64, channel string, r session.Reason, pos *session.Positions) error {
	data, err := json.Marshal(UnsubscribedEvent{
		Channel: channel, Reason: r.Code, Resubscribe: r.Reconnect, Message: r.Message,
	})
	if err != nil {
		return err
	}
	b := append(s.open(), "event: unsubscribed\nid: "...)
	return s.event(s.enc.appendText(b, pos.Entries), data)
}

// Final writes "reauth" when the token expired, then "disconnect".
func (s *Sink) Final(r session.Reason, delay time.Duration) error {
	data, err := json.Marshal(DisconnectEvent{
		Reason: r.Code, Reconnect: r.Reconnect, DelayMS: delay.Milliseconds(), Message: r.Message,
	})
	if err != nil {
		return err
	}
	if r.Code == session.ReasonTokenExpired.Code {
		if err := s.event(append(s.open(), "event: reauth"...), data); err != nil {
			return err
		}
	}
	return s.event(append(s.open(), "event: disconnect"...), data)
}

// Frame writes b, whole events, as they are.
func (s *Sink) Frame(b []byte) error { return s.done(append(s.open(), b...)) }

// event completes the event whose fields b ends with with a data line.
func (s *Sink) event(b, data []byte) error {
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return s.done(append(b, "\n\n"...))
}

// Flush hands what is buffered to the out, pushes it on to the client and
// returns the buffer to the pool.
func (s *Sink) Flush() error {
	if s.buf != nil {
		err := s.out.Write(s.buf)
		s.release()
		if err != nil {
			return err
		}
	}
	return s.out.Flush()
}

// Direct reports whether the out can send without blocking: a stream
// that left net/http, over a connection with a descriptor.
func (s *Sink) Direct(*fanout.Prepared) bool {
	o, ok := s.out.(*chunkOut)
	s.direct = ok && o.try != nil
	return s.direct
}

// TryFlush hands what is buffered to the out without waiting for the
// socket (Direct); what the socket did not take stays with the out, which
// sends it first on its next write.
func (s *Sink) TryFlush() (bool, error) {
	s.direct = false
	if s.buf == nil {
		return true, nil
	}
	o, ok := s.out.(*chunkOut)
	if !ok {
		return true, s.Flush()
	}
	sent, err := o.TryWrite(s.buf)
	s.release()
	return sent, err
}

// release returns the buffer to the pool, dropping what it holds.
func (s *Sink) release() {
	if s.buf != nil {
		session.PutBatchBuf(s.bufp, s.buf)
		s.buf, s.bufp = nil, nil
	}
}

// Close ends the body, when intact, returns the buffer and closes the
// connection of a stream that left net/http.
func (s *Sink) Close(_ session.Reason, intact bool) {
	s.release()
	s.out.Finish(intact)
}

func (s *Sink) Kill() {
	s.mu.Lock()
	out := s.out
	s.mu.Unlock()
	out.Kill()
}
