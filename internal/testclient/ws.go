package testclient

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/coder/websocket"
)

// Protocol is the WebSocket subprotocol a WS offers unless told otherwise.
const Protocol = "herald.v1"

var (
	pingFrame = []byte(`{"push":"ping"}`)
	pongFrame = []byte(`{"op":"pong"}`)
)

// WSOptions configures DialWS. The zero value dials with the herald.v1
// subprotocol and delivers every frame.
type WSOptions struct {
	// Subprotocols offered; nil means []string{Protocol}.
	Subprotocols []string
	// Header is sent with the upgrade request (Origin, Authorization, …).
	Header http.Header
	// HTTPClient does the upgrade request; nil means http.DefaultClient.
	HTTPClient *http.Client
	// Buffer is how many frames may wait for the test before the reader
	// stops reading the socket, and how many answered pings Pings holds.
	// Default 256.
	Buffer int
	// AnswerPings makes the reader answer each {"push":"ping"} with
	// {"op":"pong"} and report it on Pings instead of Frames.
	AnswerPings bool
	// OnEnd, when set, is called once by the reader with the error that
	// ended the connection, before Frames is closed.
	OnEnd func(error)
}

// WS is a herald.v1 client on a real WebSocket. Its reader splits every
// server message on "\n" and delivers each frame, parsed by the function
// given to DialWS, in order.
type WS[F any] struct {
	Conn   *websocket.Conn
	parse  func([]byte) F
	frames chan F
	pings  chan struct{}
	reader
}

// DialWS opens url (ws:// or wss://) and starts reading. On a refused
// upgrade it returns the response, whose body has been read.
func DialWS[F any](ctx context.Context, url string, o WSOptions, parse func([]byte) F) (*WS[F], *http.Response, error) {
	if o.Subprotocols == nil {
		o.Subprotocols = []string{Protocol}
	}
	conn, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		Subprotocols: o.Subprotocols, HTTPHeader: o.Header, HTTPClient: o.HTTPClient,
	})
	if err != nil {
		return nil, resp, err
	}
	conn.SetReadLimit(-1)
	n := o.Buffer
	if n <= 0 {
		n = 256
	}
	c := &WS[F]{
		Conn: conn, parse: parse, frames: make(chan F, n), pings: make(chan struct{}, n), reader: newReader(),
	}
	go c.read(o.AnswerPings, o.OnEnd)
	return c, resp, nil
}

func (c *WS[F]) read(answerPings bool, onEnd func(error)) {
	// Frames closes after Done, so Err is set for a test that saw it close.
	defer close(c.frames)
	defer close(c.done)
	c.err = c.readLoop(answerPings)
	if onEnd != nil {
		onEnd(c.err)
	}
}

func (c *WS[F]) readLoop(answerPings bool) error {
	for {
		if err := c.waitStalled(); err != nil {
			return err
		}
		_, msg, err := c.Conn.Read(context.Background())
		if err != nil {
			return err
		}
		for line := range bytes.SplitSeq(msg, []byte{'\n'}) {
			if answerPings && bytes.Equal(line, pingFrame) {
				if err := c.Send(pongFrame); err != nil {
					return err
				}
				select {
				case c.pings <- struct{}{}:
				default:
				}
				continue
			}
			select {
			case c.frames <- c.parse(line):
			case <-c.closing:
				return errClosed
			}
		}
	}
}

// Frames delivers the server's frames in order; it is closed when the
// connection ends.
func (c *WS[F]) Frames() <-chan F { return c.frames }

// Pings gets one value per ping answered (with AnswerPings); when Buffer
// values wait unread, further pings are answered but not reported.
func (c *WS[F]) Pings() <-chan struct{} { return c.pings }

// Next returns the next frame, ErrEnded once the connection ended and
// every frame was taken, or ErrTimeout after timeout.
func (c *WS[F]) Next(timeout time.Duration) (F, error) { return next(c.frames, timeout) }

// Send writes one text message, bounded by 5 s.
func (c *WS[F]) Send(b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Conn.Write(ctx, websocket.MessageText, b)
}

// Close drops the connection from the client's side, without a close
// handshake, and waits for the reader. It may be called more than once.
func (c *WS[F]) Close() {
	c.close(func() { _ = c.Conn.CloseNow() })
}

// CloseStatus is the close code the connection ended with, -1 when it
// did not end with a close frame (or has not ended).
func (c *WS[F]) CloseStatus() websocket.StatusCode {
	var ce websocket.CloseError
	if errors.As(c.Err(), &ce) {
		return ce.Code
	}
	return -1
}
