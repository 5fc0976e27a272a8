package ws

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/subscriptions"
)

// Conn is the WebSocket side of one session.Conn: the reader, the
// herald.v1 requests and the connection's timers. The session.Conn's
// writer writes through sink.
type Conn struct {
	env *Env
	c   *session.Conn
	ws  *websocket.Conn
	raw *frameWatch // the connection under ws: its reads and their deadline

	connect Connect // admits the connection at its connect request

	connected atomic.Bool
	pubGrants atomic.Pointer[publishGrants]

	lastRecv atomic.Int64 // unix nanoseconds of the last frame received
	inflight atomic.Int32
	idsMu    sync.Mutex
	ids      []uint64 // the ids of the requests in flight
	reqs     sync.WaitGroup

	// One timer for the connection's deadlines (timersDue): the connect
	// and client timeouts, the server's pings and the token's expiry.
	timerMu sync.Mutex
	timer   *time.Timer
	stopped bool // the connection ended: the timer is not armed again
	// mark is, in unix nanoseconds, when Start started (for
	// ConnectTimeout) until the connection is connected, then when its
	// next ping is due.
	mark int64

	sink frameSink

	done   func() // Start's
	resume func() // turn, which the poller starts when a parked connection's bytes come
}

// publishGrants are the compiled publish grants of the current token.
type publishGrants struct {
	grants subscriptions.Grants
	err    error // the token holds an invalid publish grant
}

// Accept completes the WebSocket handshake of r, whose Upgrade,
// subprotocol and Origin the handler has checked, for the connection c,
// which connect admits once its connect frame comes. It returns the
// connection ready to Start, before it is shared with the server or a hub.
// On error Accept has answered the request (a broken handshake: 4xx).
// From then on r.Context() must not be used: the connection is hijacked.
func Accept(w http.ResponseWriter, r *http.Request, env *Env, c *session.Conn, connect Connect) (*Conn, error) {
	wc := &Conn{env: env, c: c, connect: connect}
	b := c.Bounds()
	wc.sink.timeout = b.WriteTimeout
	wc.sink.expiryGrace = b.ExpiryGrace
	wc.sink.requests = env.Requests
	c.Out = &wc.sink
	wc.Touch()
	hj := &hijacker{ResponseWriter: w, maxMessage: int64(b.MaxMessageSize)}
	ws, err := websocket.Accept(hj, r, &websocket.AcceptOptions{
		Subprotocols:       []string{Protocol},
		InsecureSkipVerify: true, // the handler has checked the Origin
		OnPingReceived: func(context.Context, []byte) bool {
			wc.Touch()
			return true
		},
		OnPongReceived: func(context.Context, []byte) { wc.Touch() },
	})
	if err != nil {
		return nil, err
	}
	// One byte over the bound, so readMessage sees an oversized message and
	// closes with message_too_big rather than the library's own 1009 at
	// its default 32 KiB. A message whose frame headers announce more is
	// refused at the header by raw, before its payload arrives.
	ws.SetReadLimit(int64(b.MaxMessageSize) + 1)
	wc.ws = ws
	wc.raw = hj.conn
	wc.sink.ws = ws
	wc.sink.raw = hj.conn
	wc.sink.gate = hj.gate
	c.SetAbort(wc.sink.abort)
	c.StartWriting()
	return wc, nil
}

// Start runs the connection until it ends, then ends it and calls done,
// once the final frames are written, every request is over and the
// subscriptions are released; what is left to release (the user's and the
// server's slots, the registration) is the server's. Start returns at
// once: the connection's reader runs on goroutines of its own (turn).
func (w *Conn) Start(done func()) {
	w.done = done
	w.resume = w.turn
	w.startTimers()
	go w.run(true)
}

// turn is the reader resumed by the poller: the client's bytes came.
func (w *Conn) turn() { w.run(false) }

// run is the reader: it reads and handles the client's messages (after
// waiting for the first when wait is set), then either parks the
// connection until the client's next bytes come (where it can,
// frameWatch.park: the poller then starts turn, on a new goroutine, and
// this one ends, so an idle connection holds no goroutine) or ends the
// connection. What comes before and after reading lives in functions of
// its own, so the frames a reader that waits keeps on its stack are few
// (see apart).
func (w *Conn) run(wait bool) {
	if w.readGuarded(wait) {
		return
	}
	w.end()
	w.done()
}

// readGuarded runs readLoop; should handling a frame panic (a bug), only
// this connection ends, as server_error, with the stack logged — as
// net/http did while the reader was its handler. True: the connection
// was parked.
func (w *Conn) readGuarded(wait bool) (parked bool) {
	defer func() {
		if p := recover(); p != nil {
			w.c.Close(w.panicked(p), 0)
			parked = false
		}
	}()
	return w.readLoop(wait)
}

// panicked logs a recovered panic of this connection's reader and returns
// the reason to close it with.
func (w *Conn) panicked(p any) session.Reason {
	w.logError("gateway: websocket handler panicked", fmt.Errorf("%v", p), slog.String("stack", string(debug.Stack())))
	return session.ReasonServerError
}

// startTimers starts the connection's one timer, for the connect and
// client timeouts until connect.
func (w *Conn) startTimers() {
	w.mark = time.Now().UnixNano()
	w.timer = stoppedTimer(w.timersDue)
	w.timer.Reset(min(w.c.Bounds().ConnectTimeout, w.c.Bounds().ClientTimeout))
}

// stopTimers stops the timer for good (the connection ended).
func (w *Conn) stopTimers() {
	w.timerMu.Lock()
	defer w.timerMu.Unlock()
	w.stopped = true
	w.timer.Stop()
}

// timersDue acts on the connection's deadlines and re-arms the timer for
// the first of them to come (timeoutsDue, expiryDue, beatDue). It runs on
// the timer, and after connect and refresh.
func (w *Conn) timersDue() {
	w.timerMu.Lock()
	defer w.timerMu.Unlock()
	if w.stopped || w.c.Closed() {
		return
	}
	b, now := w.c.Bounds(), time.Now()
	next, open := w.timeoutsDue(b, now)
	if !open {
		return
	}
	if exp, open := w.expiryDue(b, now); !open {
		return
	} else if exp > 0 {
		next = min(next, exp)
	}
	if w.connected.Load() {
		next = min(next, w.beatDue(b, now))
	}
	w.timer.Reset(next)
}

// startBeats has the server's pings (the core's heartbeat) start, one
// HeartbeatInterval from now (connect).
func (w *Conn) startBeats() {
	w.timerMu.Lock()
	w.mark = time.Now().Add(w.c.Bounds().HeartbeatInterval).UnixNano()
	w.timerMu.Unlock()
}

// beatDue has the writer send a ping when one is due and returns when the
// next is. It runs under timerMu, once connected.
func (w *Conn) beatDue(b *session.Bounds, now time.Time) time.Duration {
	if at := time.Unix(0, w.mark); now.Before(at) {
		return at.Sub(now)
	}
	w.c.Beat()
	w.mark = now.Add(b.HeartbeatInterval).UnixNano()
	return b.HeartbeatInterval
}

// end waits for the writer's final frames and for every request, and
// releases the subscriptions.
func (w *Conn) end() {
	<-w.c.FinalDone
	w.stopTimers()
	w.c.Cancel()
	w.reqs.Wait()
	w.c.SetAbort(nil)
	w.c.UnsubscribeAll()
}

// stoppedTimer returns a timer for f that is not running; Reset starts it.
// Assigning the timer before starting it keeps f from seeing a nil field.
func stoppedTimer(f func()) *time.Timer {
	t := time.AfterFunc(time.Hour, f)
	t.Stop()
	return t
}

// readBufs recycles the buffers client messages are read into.
var readBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readLoop reads and handles messages until the connection is parked
// (true: the poller resumes it) or must close, and closes it for that
// reason; unless wait is set, the client's bytes are there to read. Where the connection parks, the goroutine that read a message
// ends once the client has nothing more to read; elsewhere the reader
// waits for the client's next bytes outside the library
// (frameWatch.wait) and reads and handles each message on a goroutine of
// its own (apart), so its own stack stays at the minimum, 2 KiB, for the
// connection's lifetime.
func (w *Conn) readLoop(wait bool) bool {
	parks := w.raw.parks()
	for {
		var r session.Reason
		if wait && w.raw.park(w.resume) {
			return true
		}
		wait = true
		if parks {
			r = w.next()
		} else {
			w.raw.wait()
			r = w.apart(w.next)
		}
		if r.Code != "" {
			w.c.Close(r, 0)
			return false
		}
		if w.c.Closed() {
			return false // the reason is set already
		}
	}
}

// next reads the next message and handles it. A non-empty Reason closes
// the connection.
func (w *Conn) next() session.Reason {
	typ, rd, err := w.ws.Reader(context.Background())
	if err != nil {
		return w.readErrorReason()
	}
	buf := readBufs.Get().(*bytes.Buffer)
	r := w.readMessage(typ, rd, buf)
	if buf.Cap() <= 2*DefaultMaxMessageSize {
		readBufs.Put(buf)
	}
	return r
}

// readMessage reads one message into buf and handles it. A non-empty
// Reason closes the connection.
func (w *Conn) readMessage(typ websocket.MessageType, rd io.Reader, buf *bytes.Buffer) session.Reason {
	max := w.c.Bounds().MaxMessageSize
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(rd, int64(max)+1)); err != nil {
		return w.readErrorReason()
	}
	w.Touch()
	if buf.Len() > max {
		w.limit(session.LimitMessageSize)
		return session.WithMessage(session.ReasonMessageTooBig, fmt.Sprintf("a message exceeded %d bytes", max))
	}
	if typ != websocket.MessageText {
		return session.WithMessage(session.ReasonProtocolError, Protocol+" uses text messages only; got a binary message")
	}
	if !utf8.Valid(buf.Bytes()) {
		return session.WithMessage(session.ReasonProtocolError, "a text message was not valid UTF-8")
	}
	return w.handle(buf.Bytes())
}

// apart runs f on a goroutine of its own and waits for it. Reading a
// message inside the library, decoding it and the work of a request
// (verifying a token, ...) need a deep stack, which the reader, idle most
// of a connection's life, would keep: a stack grows by doubling, and the
// garbage collector halves it only while less than a quarter of it (the
// guard space for nosplit functions included) is in use, which a waiting
// reader never is once its stack grew. The goroutine that read a message
// ends with it instead. A client that sends WebSocket control frames
// (ping, pong) and no message between them keeps that goroutine waiting
// inside the library until its next message, as browsers never do.
func (w *Conn) apart(f func() session.Reason) session.Reason {
	done := make(chan session.Reason, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- w.panicked(p)
			}
		}()
		done <- f()
	}()
	return <-done
}

// readErrorReason says why a read failed: the client went away, unless a
// write of ours missed its deadline and so dropped the connection, or a
// frame header announced a message over MaxMessageSize (frameWatch).
func (w *Conn) readErrorReason() session.Reason {
	switch {
	case w.sink.timedOut.Load():
		return session.ReasonWriteTimeout
	case w.raw != nil && w.raw.tooBig.Load():
		w.limit(session.LimitMessageSize)
		return session.WithMessage(session.ReasonMessageTooBig, fmt.Sprintf("a message exceeded %d bytes", w.c.Bounds().MaxMessageSize))
	}
	return session.ReasonClientClosed
}

// handle decodes and dispatches one client frame.
func (w *Conn) handle(msg []byte) session.Reason {
	f, err := decodeFrame(msg)
	if err != nil {
		var fe *frameError
		if !errors.As(err, &fe) {
			fe = &frameError{code: CodeBadRequest, message: err.Error()}
		}
		w.replyError(fe.id, opLabel(f.Op), fe.code, fe.message)
		return session.Reason{}
	}
	op := OpsByName[f.Op] // decodeFrame took only known ops
	if !w.connected.Load() && !op.BeforeConnect {
		return session.WithMessage(session.ReasonProtocolError, fmt.Sprintf("%q before connect: the first request must be connect", f.Op))
	}
	if op.Reply && w.idInFlight(f.ID) {
		w.refuseDuplicateID(&f)
		return session.Reason{}
	}
	if op.Async {
		w.spawn(op, &f)
	} else {
		op.handle(w, &f)
	}
	return session.Reason{}
}

// opLabel bounds the op metric label.
func opLabel(op string) string {
	if o, ok := OpsByName[op]; ok && o.Reply {
		return op
	}
	return "invalid"
}

// spawn runs a request of op in its own goroutine, unless MaxInflight
// requests are running already.
func (w *Conn) spawn(op *Op, f *ClientFrame) {
	if !w.startRequest(f.ID) {
		w.limit(session.LimitInflight)
		w.replyError(f.ID, f.Op, CodeTooManyRequests, fmt.Sprintf(
			"more than %d requests in flight: wait for replies before sending more", w.c.Bounds().MaxInflight))
		return
	}
	req := *f
	w.reqs.Add(1)
	go func() {
		defer w.reqs.Done()
		op.handle(w, &req)
	}()
}

// limit counts a refusal at the bound named limit.
func (w *Conn) limit(limit string) { w.env.Limits.WithLabelValues(limit).Inc() }

// Touch records that the client sent something (a ping or a pong too).
func (w *Conn) Touch() { w.lastRecv.Store(time.Now().UnixNano()) }

// timeoutsDue closes a connection that sent no connect frame within
// ConnectTimeout of its start, or nothing for ClientTimeout; otherwise it
// returns when either could first happen. False: it closed the
// connection. Bytes of the client's that wait in the socket count as
// received: the client answered, and only the server was late to read
// (a busy machine), which must not cost the client its connection.
func (w *Conn) timeoutsDue(b *session.Bounds, now time.Time) (time.Duration, bool) {
	idle := now.Sub(time.Unix(0, w.lastRecv.Load()))
	if idle >= b.ClientTimeout && w.raw.unread() {
		w.lastRecv.Store(now.UnixNano())
		idle = 0
	}
	if idle >= b.ClientTimeout {
		w.limit(session.LimitClientTimeout)
		w.c.Close(session.WithMessage(session.ReasonTimeout, fmt.Sprintf(
			"nothing received for %s (answer every ping with a pong)", b.ClientTimeout)), 0)
		// A writer blocked on the silent peer would hold the connection
		// until WriteTimeout: it gets finalWriteTimeout to finish (a peer
		// that still reads gets its push and close code), then the
		// connection is dropped.
		w.sink.abort()
		return 0, false
	}
	next := b.ClientTimeout - idle
	if !w.connected.Load() {
		left := b.ConnectTimeout - now.Sub(time.Unix(0, w.mark))
		if left <= 0 {
			w.connectTimedOut()
			return 0, false
		}
		next = min(next, left)
	}
	return next, true
}

// connectTimedOut closes a connection that sent no connect frame in time.
func (w *Conn) connectTimedOut() {
	if w.connected.Load() || w.c.Closed() {
		return
	}
	w.limit(session.LimitConnectTimeout)
	w.c.Close(session.WithMessage(session.ReasonTimeout, fmt.Sprintf("no connect frame within %s", w.c.Bounds().ConnectTimeout)), 0)
}

// reply queues a success reply.
func (w *Conn) reply(id uint64, op string, result any) {
	w.sink.requests.WithLabelValues(op, "ok").Inc()
	w.c.PushCtl(session.CtlItem{Kind: session.CtlFrame, Frame: encodeResult(id, result)})
}

// replyError queues an error reply.
func (w *Conn) replyError(id uint64, op, code, message string) {
	w.sink.requests.WithLabelValues(op, code).Inc()
	w.c.PushCtl(session.CtlItem{Kind: session.CtlFrame, Frame: encodeError(id, code, message)})
}

// logError logs a failure of this connection, rate limited.
func (w *Conn) logError(msg string, err error, attrs ...slog.Attr) {
	attrs = append(attrs, slog.Uint64("conn", w.c.ID), slog.String("error", err.Error()))
	w.env.Log.Log(slog.LevelError, msg, attrs...)
}
