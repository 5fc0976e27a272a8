package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/heraldgw/herald/fanout"
)

// sseSink writes the SSE framing (text/event-stream) of a connection.
type sseSink struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	enc cursorEncoder
	buf []byte
}

func newSSESink(w http.ResponseWriter) *sseSink {
	return &sseSink{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 256)}
}

func (s *sseSink) setDeadline(t time.Time) error {
	err := s.rc.SetWriteDeadline(t)
	if err == http.ErrNotSupported {
		return nil // a writer without deadlines (tests' recorders); nothing to set
	}
	return err
}

// publication writes "id: <cursor>\ndata: <envelope>\n\n": no event field,
// so EventSource.onmessage receives it. The envelope bytes are the shared
// encoding of the publication, written as they are.
func (s *sseSink) publication(p *fanout.Prepared, pos *positions) error {
	s.buf = append(s.buf[:0], "id: "...)
	s.buf = append(s.buf, s.enc.encode(pos.entries)...)
	s.buf = append(s.buf, "\ndata: "...)
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	if _, err := s.w.Write(p.JSON()); err != nil {
		return err
	}
	_, err := s.w.Write(eventEnd)
	return err
}

var (
	eventEnd  = []byte("\n\n")
	pingFrame = []byte(": ping\n\n")
)

func (s *sseSink) heartbeat() error {
	_, err := s.w.Write(pingFrame)
	return err
}

// retry writes the reconnection delay field.
func (s *sseSink) retry(d time.Duration) error {
	s.buf = append(s.buf[:0], "retry: "...)
	s.buf = strconv.AppendInt(s.buf, d.Milliseconds(), 10)
	s.buf = append(s.buf, "\n\n"...)
	_, err := s.w.Write(s.buf)
	return err
}

// subscribedEvent is the data of a "subscribed" event.
type subscribedEvent struct {
	Channel   string `json:"channel"`
	Recovered bool   `json:"recovered"`
	Reason    string `json:"reason,omitempty"` // why not recovered
	Offset    uint64 `json:"offset"`
	Epoch     string `json:"epoch"`
}

// subscribed writes a "subscribed" event carrying the stream's cursor as
// its id, so a client that sees no publication still resumes from here.
func (s *sseSink) subscribed(sub subscription, pos *positions) error {
	data, err := json.Marshal(subscribedEvent{
		Channel: sub.channel, Recovered: sub.recovered, Reason: sub.why.Code, Offset: sub.top.Offset, Epoch: sub.top.Epoch,
	})
	if err != nil {
		return err
	}
	s.buf = append(s.buf[:0], "event: subscribed\nid: "...)
	s.buf = append(s.buf, s.enc.encode(pos.entries)...)
	return s.event(data)
}

// disconnectEvent is the data of "disconnect" (and "reauth") events.
type disconnectEvent struct {
	Reason    string `json:"reason"`
	Reconnect bool   `json:"reconnect"`
	DelayMS   int64  `json:"delay_ms"`
	Message   string `json:"message,omitempty"`
	// ExpiresAt is the token's exp in Unix seconds, in a reauth event sent
	// ahead of expiry.
	ExpiresAt int64 `json:"expires_at,omitempty"`
}

// unsubscribedEvent is the data of an "unsubscribed" event: the server
// ended one channel of the stream, the others go on.
type unsubscribedEvent struct {
	Channel     string `json:"channel"`
	Reason      string `json:"reason"`
	Resubscribe bool   `json:"resubscribe"`
	Message     string `json:"message,omitempty"`
}

// reauthMessage tells an SSE client what to do on reauth.
const reauthMessage = "the token expires soon: fetch a fresh token (or ticket) and open a new stream with last_event_id"

// refreshRequest writes a "reauth" event ahead of the token's expiry; the
// stream goes on until the server closes it, before exp.
func (s *sseSink) refreshRequest(exp time.Time) error {
	data, err := json.Marshal(disconnectEvent{
		Reason: ReasonTokenExpired.Code, Reconnect: true, Message: reauthMessage, ExpiresAt: exp.Unix(),
	})
	if err != nil {
		return err
	}
	s.buf = append(s.buf[:0], "event: reauth"...)
	return s.event(data)
}

// unsubscribed writes an "unsubscribed" event carrying the cursor of the
// channels left, so a reconnect resumes them.
func (s *sseSink) unsubscribed(channel string, r Reason, pos *positions) error {
	data, err := json.Marshal(unsubscribedEvent{
		Channel: channel, Reason: r.Code, Resubscribe: r.Reconnect, Message: r.Message,
	})
	if err != nil {
		return err
	}
	s.buf = append(s.buf[:0], "event: unsubscribed\nid: "...)
	s.buf = append(s.buf, s.enc.encode(pos.entries)...)
	return s.event(data)
}

// final writes "reauth" when the token expired, then "disconnect".
func (s *sseSink) final(r Reason, delay time.Duration) error {
	data, err := json.Marshal(disconnectEvent{
		Reason: r.Code, Reconnect: r.Reconnect, DelayMS: delay.Milliseconds(), Message: r.Message,
	})
	if err != nil {
		return err
	}
	if r.Code == ReasonTokenExpired.Code {
		s.buf = append(s.buf[:0], "event: reauth"...)
		if err := s.event(data); err != nil {
			return err
		}
	}
	s.buf = append(s.buf[:0], "event: disconnect"...)
	return s.event(data)
}

// event completes the event whose fields are in s.buf with a data line.
func (s *sseSink) event(data []byte) error {
	s.buf = append(s.buf, "\ndata: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, "\n\n"...)
	_, err := s.w.Write(s.buf)
	return err
}

func (s *sseSink) flush() error { return s.rc.Flush() }

func (s *sseSink) abort() {
	_ = s.rc.SetWriteDeadline(time.Now())
}
