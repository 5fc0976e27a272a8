package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// The publication data the publisher sends: the send time (Unix ns) first,
// then the publisher's sequence number, then optional padding:
// {"t":1740823200123456789,"k":17,"p":"xxxx"}.
type payload struct {
	T int64  `json:"t"`
	K int64  `json:"k"`
	P string `json:"p,omitempty"`
}

var (
	wsPubPrefix = []byte(`{"push":"pub",`)
	wsPingFrame = []byte(`{"push":"ping"}`)
	offsetKey   = []byte(`"offset":`)
	dataKey     = []byte(`"data":{`)
)

// pubInfo is what a subscriber reads out of one publication.
type pubInfo struct {
	offset uint64 // the channel offset the server gave it
	sent   int64  // payload t: send time (ws) or BEGIN time (outbox), Unix ns
	seq    uint64 // payload k: the publisher's sequence number
}

// pubFields reads the offset, the send time and the sequence number out of
// a publication envelope (the WebSocket pub push, or the SSE data line). A
// subscriber may receive a hundred thousand of these a second on a shared
// 2-core machine, so the common case is a scan, not a JSON decode: the
// envelope's fields come in a fixed order (docs/protocol.md), offset
// before data, and data is last. The data's own keys may come in any
// order: a payload that went through the outbox's jsonb column comes back
// as {"k":…,"p":"…","t":…}. Anything unexpected falls back to
// encoding/json.
func pubFields(env []byte) (pubInfo, bool) {
	if i := bytes.Index(env, offsetKey); i >= 0 {
		if off, n := leadingUint(env[i+len(offsetKey):]); n > 0 {
			if j := bytes.LastIndex(env, dataKey); j > i {
				if t, k, ok := scanData(env[j+len(dataKey):]); ok {
					return pubInfo{offset: off, sent: int64(t), seq: k}, true
				}
			}
		}
	}
	var e struct {
		Offset *uint64  `json:"offset"`
		Data   *payload `json:"data"`
	}
	if json.Unmarshal(env, &e) != nil || e.Offset == nil || e.Data == nil || e.Data.T <= 0 || e.Data.K < 0 {
		return pubInfo{}, false
	}
	return pubInfo{offset: *e.Offset, sent: e.Data.T, seq: uint64(e.Data.K)}, true
}

// scanData reads t and k from a compact payload object, b starting after
// its opening brace: "t" and "k" numbers and an optional "p" string
// without escapes, in any order. ok is false for anything else.
func scanData(b []byte) (t, k uint64, ok bool) {
	var haveT, haveK bool
	for {
		if len(b) < 4 || b[0] != '"' || b[2] != '"' || b[3] != ':' {
			return 0, 0, false
		}
		name := b[1]
		b = b[4:]
		switch name {
		case 't', 'k':
			v, n := leadingUint(b)
			if n == 0 {
				return 0, 0, false
			}
			if name == 't' {
				t, haveT = v, true
			} else {
				k, haveK = v, true
			}
			b = b[n:]
		case 'p':
			if len(b) == 0 || b[0] != '"' {
				return 0, 0, false
			}
			end := bytes.IndexByte(b[1:], '"')
			if end < 0 || bytes.IndexByte(b[1:1+end], '\\') >= 0 {
				return 0, 0, false
			}
			b = b[end+2:]
		default:
			return 0, 0, false
		}
		switch {
		case len(b) > 0 && b[0] == ',':
			b = b[1:]
		case len(b) > 0 && b[0] == '}':
			return t, k, haveT && haveK
		default:
			return 0, 0, false
		}
	}
}

// leadingUint parses the decimal digits at the start of b.
func leadingUint(b []byte) (uint64, int) {
	var v uint64
	n := 0
	for n < len(b) && n < 20 && b[n] >= '0' && b[n] <= '9' {
		v = v*10 + uint64(b[n]-'0')
		n++
	}
	return v, n
}

// appendPublish appends one publish request to b: id, channel, and data
// carrying the send time now and sequence k.
func appendPublish(b []byte, id uint64, channel string, now time.Time, k int64, pad string) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, `,"op":"publish","channel":`...)
	b = strconv.AppendQuote(b, channel)
	b = append(b, `,"type":"bench.tick","schema_version":1,"data":`...)
	b = appendData(b, now, k, pad)
	return append(b, '}')
}

// appendData appends a publication's data: {"t":<now, Unix ns>,"k":<k>}
// with "p":<pad> when pad is not empty.
func appendData(b []byte, now time.Time, k int64, pad string) []byte {
	b = append(b, `{"t":`...)
	b = strconv.AppendInt(b, now.UnixNano(), 10)
	b = append(b, `,"k":`...)
	b = strconv.AppendInt(b, k, 10)
	if pad != "" {
		b = append(b, `,"p":"`...)
		b = append(b, pad...)
		b = append(b, '"')
	}
	return append(b, '}')
}

// serverFrame is any other server→client frame: a reply (id with result
// or error) or a push (disconnect, unsubscribed, refresh).
type serverFrame struct {
	ID     uint64          `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Push   string `json:"push"`
	Reason string `json:"reason"`
}

// position is a subscription's start: the subscribe result (WebSocket) or
// the subscribed event (SSE).
type position struct {
	Channel string `json:"channel"`
	Offset  uint64 `json:"offset"`
	Epoch   string `json:"epoch"`
}

// eachFrame calls fn on each newline-separated frame of a server message.
func eachFrame(msg []byte, fn func([]byte)) {
	for len(msg) > 0 {
		i := bytes.IndexByte(msg, '\n')
		if i < 0 {
			fn(msg)
			return
		}
		if i > 0 {
			fn(msg[:i])
		}
		msg = msg[i+1:]
	}
}
