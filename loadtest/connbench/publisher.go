package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// publisher publishes over one dedicated WebSocket with the herald.v1
// publish op: the fastest path the server offers (no outbox, no process
// per publication; docs/protocol.md, publish). Requests are pipelined up
// to the server's max_inflight, so the rate is not bound by one round
// trip.
type publisher struct {
	conn     *websocket.Conn
	channels []string
	slots    chan struct{} // one per request in flight
	pad      string

	// sourceTally: per channel the offsets of accepted publications;
	// refused ones by error code. Its mu guards reason too.
	sourceTally
	reason   string // why the connection ended early, if it did
	readDone chan struct{}
}

// firstPubID is the request id of publication 0 (connect is id 1).
const firstPubID = 2

func (r *runner) openPublisher(ctx context.Context) (*publisher, error) {
	token, err := r.publisherToken()
	if err != nil {
		return nil, err
	}
	conn, err := r.dialWS(ctx, r.hc)
	if err != nil {
		return nil, fmt.Errorf("connbench: publisher: %w", err)
	}
	if _, err := handshakeWS(ctx, conn, token, ""); err != nil {
		conn.CloseNow()
		return nil, fmt.Errorf("connbench: publisher: %w", err)
	}
	p := &publisher{
		conn:        conn,
		slots:       make(chan struct{}, 16), // the server's default max_inflight
		pad:         strings.Repeat("x", r.cfg.PayloadBytes),
		sourceTally: newSourceTally(r.cfg.channels()),
		readDone:    make(chan struct{}),
	}
	for c := range r.cfg.channels() {
		p.channels = append(p.channels, r.channelName(c))
	}
	go p.readReplies(r)
	return p, nil
}

// run publishes rate publications/s for d, round-robin over the channels,
// then waits up to wait for the replies still outstanding.
func (p *publisher) run(ctx context.Context, rate int, d, wait time.Duration) error {
	buf := make([]byte, 0, 256+len(p.pad))
	return p.pace(ctx, rate, d, wait, func(k int, now time.Time) error {
		buf = appendPublish(buf[:0], uint64(firstPubID+k), p.channels[k%len(p.channels)], now, int64(k), p.pad)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := p.conn.Write(wctx, websocket.MessageText, buf); err != nil {
			return fmt.Errorf("connbench: publisher: send: %w", err)
		}
		return nil
	})
}

// pace calls send for publications 0 to rate × d - 1 on schedule, each
// once it holds a slot (whoever completes the request gives it back),
// then waits up to wait for every slot to be given back. It stops early
// when readDone closes: the connection ended.
func (p *publisher) pace(ctx context.Context, rate int, d, wait time.Duration, send func(k int, now time.Time) error) error {
	err := paceEach(ctx, "publisher", rate, int(float64(rate)*d.Seconds()), func(k int, due time.Time) error {
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("connbench: publisher: %w", ctx.Err())
		case <-p.readDone:
			return fmt.Errorf("connbench: publisher: connection ended: %s", p.reason)
		}
		now := time.Now()
		p.mu.Lock()
		p.maxLag = max(p.maxLag, now.Sub(due))
		p.mu.Unlock()
		if err := send(k, now); err != nil {
			return err
		}
		p.mu.Lock()
		p.sent++
		p.mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	// Every reply is in once every slot can be taken back.
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for range cap(p.slots) {
		select {
		case p.slots <- struct{}{}:
		case <-deadline.C:
			return fmt.Errorf("connbench: publisher: replies still outstanding after %v", wait)
		case <-p.readDone:
			return fmt.Errorf("connbench: publisher: connection ended: %s", p.reason)
		}
	}
	return nil
}

// readReplies reads the publisher's connection: each reply frees a slot
// and, when accepted, records the publication's offset on its channel.
func (p *publisher) readReplies(r *runner) {
	defer close(p.readDone)
	buf := make([]byte, 0, 4096)
	var announced string
	for {
		msg, err := readMessage(context.Background(), p.conn, buf)
		if err != nil {
			p.mu.Lock()
			p.reason = r.endReason(announced, wsCloseReason(err))
			p.mu.Unlock()
			return
		}
		buf = msg
		eachFrame(msg, func(f []byte) {
			if bytes.Equal(f, wsPingFrame) {
				answer(p.conn, pongFrame)
				return
			}
			var sf serverFrame
			if bytes.HasPrefix(f, wsPubPrefix) || json.Unmarshal(f, &sf) != nil {
				return
			}
			if sf.ID < firstPubID {
				if sf.Push == "disconnect" {
					announced = sf.Reason
				}
				return
			}
			k := int(sf.ID - firstPubID)
			p.mu.Lock()
			if sf.Error != nil {
				p.errs[sf.Error.Code]++
			} else {
				var res position
				if json.Unmarshal(sf.Result, &res) == nil {
					c := k % len(p.channels)
					p.accept(c, res.Offset)
				} else {
					p.errs["undecodable_result"]++
				}
			}
			p.mu.Unlock()
			select {
			case <-p.slots:
			default: // a reply to nothing we sent; ignored
			}
		})
	}
}

// close ends the publisher's connection and waits for its reader.
func (p *publisher) close() {
	p.conn.CloseNow()
	<-p.readDone
}
