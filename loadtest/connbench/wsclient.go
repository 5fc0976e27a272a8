package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

const wsProtocol = "herald.v1"

var pongFrame = []byte(`{"op":"pong"}`)

// dialWS opens a herald.v1 WebSocket, retrying refusals the server marks
// temporary (429, 503).
func (r *runner) dialWS(ctx context.Context, hc *http.Client) (*websocket.Conn, error) {
	var conn *websocket.Conn
	err := withRetry(ctx, &r.retries, &r.retryMu, func() error {
		c, resp, err := websocket.Dial(ctx, r.wsURL(), &websocket.DialOptions{
			HTTPClient: hc, Subprotocols: []string{wsProtocol},
		})
		if err != nil {
			if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
				return refusal(resp)
			}
			return fmt.Errorf("connbench: dial %s: %w", r.wsURL(), err)
		}
		conn = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A server message is at most about 64 KiB of frames, or one large
	// publication alone; -payload-bytes keeps those under 64 KiB.
	conn.SetReadLimit(1 << 20)
	return conn, nil
}

func (r *runner) wsURL() string {
	return "ws" + strings.TrimPrefix(r.tgt.base, "http") + "/v1/ws"
}

// readMessage reads one whole message into buf (reused between calls).
func readMessage(ctx context.Context, conn *websocket.Conn, buf []byte) ([]byte, error) {
	_, rd, err := conn.Reader(ctx)
	if err != nil {
		return buf, err
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// handshakeWS sends connect (id 1) and, when channel is set, subscribe
// (id 2) at once, as a client may, and waits for both replies. It returns
// the subscribe result.
func handshakeWS(ctx context.Context, conn *websocket.Conn, token, channel string) (position, error) {
	frames := []string{`{"id":1,"op":"connect","token":` + strconv.Quote(token) + `}`}
	if channel != "" {
		frames = append(frames, `{"id":2,"op":"subscribe","channel":`+strconv.Quote(channel)+`}`)
	}
	for _, f := range frames {
		if err := conn.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			return position{}, fmt.Errorf("connbench: send %s: %w", f[:min(len(f), 40)], err)
		}
	}
	var pos position
	err := awaitReplies(ctx, conn, len(frames), func(f []byte) (uint64, error) {
		var sf serverFrame
		if bytes.HasPrefix(f, wsPubPrefix) || json.Unmarshal(f, &sf) != nil {
			return 0, nil
		}
		switch {
		case sf.ID == 0 && sf.Push == "ping":
			_ = conn.Write(ctx, websocket.MessageText, pongFrame)
		case sf.ID == 0 && sf.Push == "disconnect":
			return 0, fmt.Errorf("handshake: server disconnected: %s", sf.Reason)
		case sf.ID == 0:
		case sf.Error != nil:
			return 0, fmt.Errorf("handshake: request %d refused: %s: %s", sf.ID, sf.Error.Code, sf.Error.Message)
		case sf.ID == 2:
			if err := json.Unmarshal(sf.Result, &pos); err != nil {
				return 0, fmt.Errorf("subscribe result %s: %w", sf.Result, err)
			}
		}
		return sf.ID, nil
	})
	if err != nil {
		return position{}, fmt.Errorf("connbench: %w", err)
	}
	return pos, nil
}

// awaitReplies reads conn's messages until the replies to its requests 1
// to n are all in, handing each frame to reply, which returns the id of
// the request the frame answers (0 for a push) or an error that ends the
// wait: a refusal, say. The handshake of either server's protocol.
func awaitReplies(ctx context.Context, conn *websocket.Conn, n int, reply func(f []byte) (uint64, error)) error {
	buf := make([]byte, 0, 1024)
	var ferr error
	for pending := n; pending > 0 && ferr == nil; {
		msg, err := readMessage(ctx, conn, buf)
		if err != nil {
			return fmt.Errorf("handshake: %w", err)
		}
		buf = msg
		eachFrame(msg, func(f []byte) {
			if ferr != nil {
				return
			}
			id, err := reply(f)
			if ferr = err; err == nil && id >= 1 && id <= uint64(n) {
				pending--
			}
		})
	}
	return ferr
}

// openWS opens subscriber s: dial, connect with its own token, subscribe
// to its channel. Its reader then runs until the connection ends.
func (r *runner) openWS(ctx context.Context, s *subscriber) error {
	token, err := r.subscriberToken(s.idx, r.channelName(s.channel))
	if err != nil {
		return err
	}
	conn, err := r.dialWS(ctx, r.client(s))
	if err != nil {
		return err
	}
	pos, err := handshakeWS(ctx, conn, token, r.channelName(s.channel))
	if err != nil {
		conn.CloseNow()
		return fmt.Errorf("connbench: subscriber %d: %w", s.idx, err)
	}
	s.start = pos
	r.track(func() { conn.CloseNow() })
	r.readers.Go(func() { r.readWS(conn, s) })
	return nil
}

// readWS reads subscriber s's connection until it ends: publications are
// accounted, pings answered, a disconnect push remembered as the reason.
func (r *runner) readWS(conn *websocket.Conn, s *subscriber) {
	r.readFrames(conn, s, func(f []byte, recv time.Time) string {
		switch {
		case bytes.HasPrefix(f, wsPubPrefix):
			if p, ok := pubFields(f); ok {
				r.received(s, p, recv)
			}
		case bytes.Equal(f, wsPingFrame):
			answer(conn, pongFrame)
		default:
			var sf serverFrame
			if json.Unmarshal(f, &sf) != nil {
				return ""
			}
			switch sf.Push {
			case "disconnect":
				return sf.Reason
			case "unsubscribed":
				s.unsub++
			}
		}
		return ""
	})
}

// readFrames reads subscriber s's WebSocket until it ends, a stalled one
// only once publishing ends, handing each frame to frame with the time
// its message was read; frame returns the reason of a disconnect the
// server announced, else "". It reads with a context that never ends, so
// no timer is armed per message; stop() closes the connection instead.
func (r *runner) readFrames(conn *websocket.Conn, s *subscriber, frame func(f []byte, recv time.Time) string) {
	if s.stalled {
		<-r.resume
	}
	buf := make([]byte, 0, 512)
	var pushed string
	for {
		msg, err := readMessage(context.Background(), conn, buf)
		if err != nil {
			s.finish(r.endReason(pushed, wsCloseReason(err)))
			conn.CloseNow()
			return
		}
		buf = msg
		recv := time.Now()
		eachFrame(msg, func(f []byte) {
			if reason := frame(f, recv); reason != "" {
				pushed = reason
			}
		})
	}
}

// answer writes a reply to a server ping.
func answer(conn *websocket.Conn, frame []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = conn.Write(ctx, websocket.MessageText, frame)
	cancel()
}

// wsCloseReason names how a WebSocket ended: the close frame's reason text
// (Herald sends the reason code, e.g. "slow"), its code, or the error.
func wsCloseReason(err error) string {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		if ce.Reason != "" {
			return ce.Reason
		}
		return fmt.Sprintf("close %d", ce.Code)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "eof"
	}
	return "error"
}

// endReason is why a connection ended, as the report counts it: the
// server's announced reason, else "" when we were closing it ourselves,
// else what the transport saw.
func (r *runner) endReason(announced, seen string) string {
	switch {
	case announced != "":
		return announced
	case r.stopping.Load():
		return ""
	default:
		return seen
	}
}
