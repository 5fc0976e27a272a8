package ws

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
)

const (
	// BatchBytes is the size at which a batch message is written even
	// though more is queued: messages stay small enough for mobile clients'
	// receive limits (often 1 MiB).
	BatchBytes = 64 << 10
	// bigFrame is the size from which a frame is written as a message of
	// its own, straight from its shared bytes, instead of being copied
	// into the batch buffer.
	bigFrame = 16 << 10
	// headRoom is the room a batch buffer leaves at its start for the
	// header of the message a direct write sends (TryFlush).
	headRoom = 10
)

// frameSink writes herald.v1 frames to a WebSocket (the writer's sink). Frames
// are batched into one text message, separated by "\n", and written when
// the batch is full or the queues are empty; each message is written under
// its own deadline. Only the writer calls it, except abort and kill.
type frameSink struct {
	ws *websocket.Conn
	// raw is the connection under ws: a message's deadline is its write
	// deadline (write).
	raw         *frameWatch
	requests    *prometheus.CounterVec // herald_ws_requests_total{op,result}
	timeout     time.Duration          // WriteTimeout, per message
	expiryGrace time.Duration          // ExpiryGrace, announced in refresh pushes
	limit       time.Time              // when set, no write may last beyond it
	buf         []byte                 // headRoom free bytes, then the batch; nil while the writer is idle
	bufp        *[]byte                // the pooled slice buf came from
	// gate is the way out for direct writes (TryFlush); left is set when
	// one left a rest there, which Flush sends.
	gate *writeGate
	left bool

	// timedOut is set, before the WebSocket library drops the connection,
	// when a write missed its deadline; the reader then knows why its read
	// failed.
	timedOut atomic.Bool

	mu      sync.Mutex
	inWrite bool      // a message write is under way
	abortAt time.Time // set by abort: no write may last beyond it
}

var _ session.DirectSink = (*frameSink)(nil)

// Arm gives each message that follows the whole per-message timeout.
func (s *frameSink) Arm() error {
	s.limit = time.Time{}
	return nil
}

// SetDeadline bounds the writes that follow by t as well.
func (s *frameSink) SetDeadline(t time.Time) error {
	s.limit = t
	return nil
}

// Publication buffers {"push":"pub", followed by the shared envelope
// without its opening brace: the envelope is never re-encoded.
func (s *frameSink) Publication(p *fanout.Prepared, _ *session.Positions) error {
	env := p.JSON()
	if len(env) < 2 || env[0] != '{' {
		return nil // not an envelope; Prepared never produces one
	}
	return s.put(pubPrefix, env[1:])
}

// Heartbeat buffers the server's ping.
func (s *frameSink) Heartbeat() error { return s.put(nil, pingFrame) }

// Final buffers the disconnect push.
func (s *frameSink) Final(r session.Reason, delay time.Duration) error {
	return s.put(nil, encodeDisconnect(r, delay))
}

// RefreshRequest buffers the push asking for a fresh token before exp.
func (s *frameSink) RefreshRequest(exp time.Time) error {
	return s.put(nil, encodeRefresh(exp, s.expiryGrace))
}

// Subscribed buffers the reply to the subscribe request id.
func (s *frameSink) Subscribed(id uint64, sub session.Subscription, _ *session.Positions) error {
	s.requests.WithLabelValues(OpSubscribe, "ok").Inc()
	return s.put(nil, encodeResult(id, SubscribeResult{
		Channel: sub.Channel, Recovered: sub.Recovered, Reason: sub.Why.Code, Offset: sub.Top.Offset, Epoch: sub.Top.Epoch,
	}))
}

// SubscribeFailed buffers the error reply to the subscribe request id:
// for r, or with r zero a broker that did not answer.
func (s *frameSink) SubscribeFailed(id uint64, _ string, r session.Reason) error {
	code, msg := CodeServerError, "cannot subscribe now: the broker did not answer; retry later"
	if r.Code != "" {
		code, msg = errorCode(r), r.Message
	}
	s.requests.WithLabelValues(OpSubscribe, code).Inc()
	return s.put(nil, encodeError(id, code, msg))
}

// Unsubscribed buffers the reply to the unsubscribe request id, or with id
// 0 the push ending one subscription for r.
func (s *frameSink) Unsubscribed(id uint64, channel string, r session.Reason, _ *session.Positions) error {
	if id != 0 {
		s.requests.WithLabelValues(OpUnsubscribe, "ok").Inc()
		return s.put(nil, encodeResult(id, Empty{}))
	}
	return s.put(nil, encodeUnsubscribed(channel, r))
}

// Frame buffers a whole frame.
func (s *frameSink) Frame(b []byte) error { return s.put(nil, b) }

// put buffers the frame head+body, writing the batch first when the
// frame would overflow it; a big frame becomes a message of its own.
func (s *frameSink) put(head, body []byte) error {
	n := len(head) + len(body)
	if n >= bigFrame {
		if err := s.Flush(); err != nil {
			return err
		}
		return s.write(func(ctx context.Context) error {
			mw, err := s.ws.Writer(ctx, websocket.MessageText)
			if err != nil {
				return err
			}
			if len(head) > 0 {
				if _, err := mw.Write(head); err != nil {
					return err
				}
			}
			if _, err := mw.Write(body); err != nil {
				return err
			}
			return mw.Close()
		})
	}
	if len(s.buf) > headRoom && len(s.buf)-headRoom+1+n > BatchBytes {
		if err := s.Flush(); err != nil {
			return err
		}
	}
	if s.buf == nil {
		s.bufp = session.GetBatchBuf()
		s.buf = append((*s.bufp)[:0], make([]byte, headRoom)...)
	}
	if len(s.buf) > headRoom {
		s.buf = append(s.buf, '\n')
	}
	s.buf = append(s.buf, head...)
	s.buf = append(s.buf, body...)
	return nil
}

// Flush writes the batch as one message and returns its buffer to the
// pool: an idle connection holds none.
func (s *frameSink) Flush() error {
	if s.left {
		s.left = false
		if err := s.write(func(context.Context) error { return s.gate.sendRest() }); err != nil {
			s.release()
			return err
		}
	}
	if len(s.buf) <= headRoom {
		s.release()
		return nil
	}
	err := s.write(func(ctx context.Context) error {
		return s.ws.Write(ctx, websocket.MessageText, s.buf[headRoom:])
	})
	s.release()
	return err
}

// Direct reports whether p can be written without blocking: the
// connection has a descriptor, and p's frame is not one the writer would
// send as a message of its own (put).
func (s *frameSink) Direct(p *fanout.Prepared) bool {
	return s.gate != nil && s.gate.try != nil && len(pubPrefix)+p.Size() < bigFrame
}

// TryFlush sends the batch as one text message (an unmasked frame, as
// the library frames a server's message) through the gate, without
// waiting for the socket. When nothing went out, the batch stays for the
// writer's Flush; when a part did, the gate keeps the rest, which Flush
// sends first.
func (s *frameSink) TryFlush() (bool, error) {
	n := len(s.buf) - headRoom
	if n <= 0 {
		s.release()
		return true, nil
	}
	start := headRoom - putHeader(s.buf[:headRoom], n)
	sent, err := s.gate.tryWrite(s.buf[start:])
	switch {
	case err != nil:
		s.release()
		_ = s.ws.CloseNow()
		return false, err
	case sent == 0:
		return false, nil // the writer sends the batch
	case sent < len(s.buf)-start:
		s.left = true
		s.release()
		return false, nil
	}
	s.release()
	return true, nil
}

// putHeader writes the header of an unmasked final text frame of n
// payload bytes at the end of room, and returns its length.
func putHeader(room []byte, n int) int {
	var h [headRoom]byte
	h[0] = 0x81 // FIN, text
	l := 2
	switch {
	case n < 126:
		h[1] = byte(n)
	case n <= 0xffff:
		h[1] = 126
		binary.BigEndian.PutUint16(h[2:], uint16(n))
		l = 4
	default:
		h[1] = 127
		binary.BigEndian.PutUint64(h[2:], uint64(n))
		l = 10
	}
	copy(room[len(room)-l:], h[:l])
	return l
}

// write runs one message write under the connection's write deadline:
// now + the per-message timeout (or the limit, if sooner), or abort's if
// that comes first. It costs no timer or context per message. The
// deadline is cleared afterwards, so the library's own control frames
// (pongs, the close frame) are not bound by it. A write that misses it
// fails, and the connection is dropped.
func (s *frameSink) write(f func(ctx context.Context) error) error {
	deadline := time.Now().Add(s.timeout)
	if !s.limit.IsZero() && s.limit.Before(deadline) {
		deadline = s.limit
	}
	s.mu.Lock()
	if !s.abortAt.IsZero() && s.abortAt.Before(deadline) {
		deadline = s.abortAt
	}
	s.inWrite = true
	err := s.raw.SetWriteDeadline(deadline)
	s.mu.Unlock()
	if err == nil {
		err = f(context.Background())
	}
	s.mu.Lock()
	s.inWrite = false
	if err == nil {
		err = s.raw.SetWriteDeadline(time.Time{})
	}
	s.mu.Unlock()
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.timedOut.Store(true)
			err = fmt.Errorf("gateway: websocket write: %w", err)
		}
		_ = s.ws.CloseNow()
	}
	return err
}

// abort is called when the connection is closed as slow or timed out: a
// write under way gets FinalWriteTimeout more to finish (a slow but live
// client then still receives its disconnect push and close code), after
// which its deadline passes and the connection is dropped (a stalled
// client). Either way the publications it holds are released within that
// time, not WriteTimeout.
func (s *frameSink) abort() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.abortAt.IsZero() {
		s.abortAt = time.Now().Add(session.FinalWriteTimeout)
		if s.inWrite {
			_ = s.raw.SetWriteDeadline(s.abortAt)
		}
	}
}

// Close ends the connection: with the reason's close code when the final
// frames went out (the close handshake waits at most a few seconds for
// the client, and not at all for one closed for a timeout); otherwise it
// drops the TCP connection.
func (s *frameSink) Close(r session.Reason, intact bool) {
	s.release()
	if !intact {
		_ = s.ws.CloseNow()
		return
	}
	if r.Code == session.ReasonMessageTooBig.Code && s.raw.tooBig.Load() {
		// Refused at its frame header (frameWatch): the close frame is
		// out now, and the payload the client may still be sending is
		// read and discarded for a short while only.
		s.raw.drain(time.Now().Add(session.FinalWriteTimeout))
	}
	if r.Code == session.ReasonTimeout.Code {
		// The client sent nothing for a timeout: it is most likely gone,
		// and coder/websocket would wait 5 s for its close frame (first
		// for the reader, blocked reading it, then for the frame) with
		// the connection and its goroutines held. An expired read
		// deadline ends the reader's read and the handshake's wait at
		// once; the close frame is still written before the connection
		// is dropped.
		_ = s.raw.SetReadDeadline(time.Now())
	}
	_ = s.ws.Close(session.CloseCode(r), r.Code)
}

func (s *frameSink) Kill() { _ = s.ws.CloseNow() }

// release returns the batch buffer to the pool.
func (s *frameSink) release() {
	if s.buf == nil {
		return
	}
	session.PutBatchBuf(s.bufp, s.buf)
	s.buf, s.bufp = nil, nil
}
