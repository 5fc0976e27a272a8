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
	dataTimeKey = []byte(`"data":{"t":`)
)

// pubFields reads the offset and the send time out of a publication
// envelope (the WebSocket pub push, or the SSE data line). A subscriber
// may receive a hundred thousand of these a second on a shared 2-core
// machine, so the common case is a scan, not a JSON decode: the envelope's
// fields come in a fixed order (docs/protocol.md), offset before data, and
// data is last. Anything unexpected falls back to encoding/json.
func pubFields(env []byte) (offset uint64, sent int64, ok bool) {
	if i := bytes.Index(env, offsetKey); i >= 0 {
		if off, n := leadingUint(env[i+len(offsetKey):]); n > 0 {
			if j := bytes.LastIndex(env, dataTimeKey); j > i {
				if t, n := leadingUint(env[j+len(dataTimeKey):]); n > 0 {
					return off, int64(t), true
				}
			}
		}
	}
	var e struct {
		Offset *uint64  `json:"offset"`
		Data   *payload `json:"data"`
	}
	if json.Unmarshal(env, &e) != nil || e.Offset == nil || e.Data == nil {
		return 0, 0, false
	}
	return *e.Offset, e.Data.T, true
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
	b = append(b, `,"type":"bench.tick","schema_version":1,"data":{"t":`...)
	b = strconv.AppendInt(b, now.UnixNano(), 10)
	b = append(b, `,"k":`...)
	b = strconv.AppendInt(b, k, 10)
	if pad != "" {
		b = append(b, `,"p":"`...)
		b = append(b, pad...)
		b = append(b, '"')
	}
	return append(b, `}}`...)
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
