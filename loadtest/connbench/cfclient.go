package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
)

// Centrifugo's client protocol (JSON over WebSocket, its default): a
// command per line, replies and pushes newline-separated in a message, a
// ping as an empty object that the client answers with one.
var (
	cfPing   = []byte(`{}`)
	cfPubKey = []byte(`"pub":{`)
)

// cfToken is a Centrifugo connection token for subject sub: HS256 with
// sub and exp.
func cfToken(secret, sub string) (string, error) {
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": sub, "exp": time.Now().Add(tokenTTL).Unix(),
	}).SignedString([]byte(secret))
	if err != nil {
		return "", fmt.Errorf("connbench: centrifugo token: %w", err)
	}
	return tok, nil
}

// cfReply is a Centrifugo reply or push; only what the generator reads.
type cfReply struct {
	ID    uint64 `json:"id"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Subscribe *struct {
		Offset uint64 `json:"offset"`
		Epoch  string `json:"epoch"`
	} `json:"subscribe"`
	Push *struct {
		Disconnect *struct {
			Code   int    `json:"code"`
			Reason string `json:"reason"`
		} `json:"disconnect"`
		Unsubscribe json.RawMessage `json:"unsubscribe"`
	} `json:"push"`
}

// openCF opens subscriber s on Centrifugo: dial /connection/websocket,
// connect with its own token and subscribe to its channel in one message,
// as Herald's subscribers do. Its reader then runs until the connection
// ends.
func (r *runner) openCF(ctx context.Context, s *subscriber) error {
	token, err := cfToken(r.tgt.secret, fmt.Sprintf("s%d-%s", s.idx, r.runID))
	if err != nil {
		return err
	}
	url := "ws" + strings.TrimPrefix(r.tgt.base, "http") + "/connection/websocket"
	conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: r.client(s)})
	if err != nil {
		return fmt.Errorf("connbench: subscriber %d: dial %s: %w", s.idx, url, err)
	}
	conn.SetReadLimit(1 << 20)
	ch := r.channelName(s.channel)
	cmds := `{"id":1,"connect":{"token":` + strconv.Quote(token) + `}}` + "\n" +
		`{"id":2,"subscribe":{"channel":` + strconv.Quote(ch) + `}}`
	if err := conn.Write(ctx, websocket.MessageText, []byte(cmds)); err != nil {
		conn.CloseNow()
		return fmt.Errorf("connbench: subscriber %d: send connect: %w", s.idx, err)
	}
	if err := r.handshakeCF(ctx, conn, s); err != nil {
		conn.CloseNow()
		return fmt.Errorf("connbench: subscriber %d: %w", s.idx, err)
	}
	r.track(func() { conn.CloseNow() })
	r.readers.Go(func() { r.readCF(conn, s) })
	return nil
}

// handshakeCF waits for the connect and subscribe replies and notes where
// the subscription starts.
func (r *runner) handshakeCF(ctx context.Context, conn *websocket.Conn, s *subscriber) error {
	return awaitReplies(ctx, conn, 2, func(f []byte) (uint64, error) {
		var rep cfReply
		switch {
		case bytes.Equal(f, cfPing) || json.Unmarshal(f, &rep) != nil:
			return 0, nil
		case rep.Error != nil:
			return 0, fmt.Errorf("handshake: request %d refused: %d %s", rep.ID, rep.Error.Code, rep.Error.Message)
		case rep.ID == 2 && rep.Subscribe != nil:
			s.start = position{Channel: r.channelName(s.channel), Offset: rep.Subscribe.Offset, Epoch: rep.Subscribe.Epoch}
		}
		return rep.ID, nil
	})
}

// readCF reads subscriber s's Centrifugo connection until it ends, as
// readWS does Herald's: publications accounted, pings answered, a
// disconnect remembered as the reason.
func (r *runner) readCF(conn *websocket.Conn, s *subscriber) {
	r.readFrames(conn, s, func(f []byte, recv time.Time) string {
		if bytes.Equal(f, cfPing) {
			answer(conn, cfPing)
			return ""
		}
		if p, ok := cfPubFields(f); ok {
			r.received(s, p, recv)
			return ""
		}
		var rep cfReply
		switch {
		case json.Unmarshal(f, &rep) != nil || rep.Push == nil:
		case rep.Push.Disconnect != nil:
			return rep.Push.Disconnect.Reason
		case rep.Push.Unsubscribe != nil:
			s.unsub++
		}
		return ""
	})
}

// cfPubFields reads a publication push,
// {"push":{"channel":…,"pub":{"data":{"t":…,"k":…},"offset":…}}}: data
// comes before the offset there.
func cfPubFields(f []byte) (pubInfo, bool) {
	i := bytes.Index(f, cfPubKey)
	if i < 0 {
		return pubInfo{}, false
	}
	pub := f[i+len(cfPubKey)-1:]
	if j := bytes.Index(pub, dataKey); j >= 0 {
		if t, k, ok := scanData(pub[j+len(dataKey):]); ok {
			if o := bytes.LastIndex(pub, offsetKey); o > j {
				if off, n := leadingUint(pub[o+len(offsetKey):]); n > 0 {
					return pubInfo{offset: off, sent: int64(t), seq: k}, true
				}
			}
		}
	}
	var e struct {
		Offset *uint64  `json:"offset"`
		Data   *payload `json:"data"`
	}
	// The decoder reads the pub object and leaves the push's closing braces.
	if json.NewDecoder(bytes.NewReader(pub)).Decode(&e) != nil || e.Offset == nil || e.Data == nil || e.Data.T <= 0 || e.Data.K < 0 {
		return pubInfo{}, false
	}
	return pubInfo{offset: *e.Offset, sent: e.Data.T, seq: uint64(e.Data.K)}, true
}

// cfPublisher publishes through Centrifugo's server API (POST
// /api/publish with the API key), one request per publication, up to 16
// in flight: the path a backend uses. Each request has a connection of
// its own: a POST sent on a kept-alive connection the server was closing
// fails with EOF and cannot be retried (it may have published).
type cfPublisher struct {
	publisher
	r  *runner
	hc *http.Client
}

func (r *runner) openCFPublisher() *cfPublisher {
	p := &cfPublisher{r: r, hc: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	p.slots = make(chan struct{}, 16)
	p.pad = strings.Repeat("x", r.cfg.PayloadBytes)
	p.sourceTally = newSourceTally(r.cfg.channels())
	p.readDone = make(chan struct{})
	for c := range r.cfg.channels() {
		p.channels = append(p.channels, r.channelName(c))
	}
	return p
}

// run publishes rate publications/s for d, round-robin over the channels,
// then waits up to wait for the requests still in flight.
func (p *cfPublisher) run(ctx context.Context, rate int, d, wait time.Duration) error {
	return p.pace(ctx, rate, d, wait, func(k int, now time.Time) error {
		go p.publish(ctx, k, now)
		return nil
	})
}

// publish makes publication k and records its offset.
func (p *cfPublisher) publish(ctx context.Context, k int, now time.Time) {
	defer func() { <-p.slots }()
	c := k % len(p.channels)
	data := json.RawMessage(appendData(nil, now, int64(k), p.pad))
	var res struct {
		Offset uint64 `json:"offset"`
	}
	// An overloaded server may take a while to answer; a request given up
	// on may still have published, which the delivery check would report.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := cfAPI(ctx, p.hc, p.r.tgt, "publish", map[string]any{"channel": p.channels[c], "data": data}, &res)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		msg := err.Error()
		p.errs["api_error: "+msg[:min(len(msg), 100)]]++
		return
	}
	p.accept(c, res.Offset)
}

func (p *cfPublisher) close() {}
