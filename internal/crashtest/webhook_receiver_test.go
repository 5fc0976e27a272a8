package crashtest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// hookSecret is the webhook handler's signing secret in these tests.
const hookSecret = "whsec_Nm8b7X2m0qkq3v9sQ8pZkR4y1WcT6hJd5LaE2uFgYiM="

// hookRequest is one request the receiver read to its end.
type hookRequest struct {
	seq     int    // arrival order at the receiver, from 0
	id      string // the webhook-id header
	body    string
	bodyID  string // the body's id
	channel string // the body's channel
	signed  bool   // webhook-signature verified (verifySignature)
}

// hookReceiver is a webhook endpoint on loopback that logs every request
// it read completely. While down it answers 503 and logs nothing.
type hookReceiver struct {
	down    atomic.Bool
	refused atomic.Int64 // requests answered 503
	delay   time.Duration

	mu    sync.Mutex
	log   []hookRequest
	byID  map[string][]int // webhook-id → indexes into log
	added chan struct{}    // signalled (non-blocking) on each logged request
}

func newHookReceiver(delay time.Duration) *hookReceiver {
	return &hookReceiver{delay: delay, byID: map[string][]int{}, added: make(chan struct{}, 1)}
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the sender died mid-request: nothing was received
	}
	if h.down.Load() {
		h.refused.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var m struct{ ID, Channel string }
	_ = json.Unmarshal(body, &m)
	req := hookRequest{id: r.Header.Get("webhook-id"), body: string(body), bodyID: m.ID, channel: m.Channel,
		signed: verifySignature(hookSecret, r.Header, body, time.Now())}
	h.mu.Lock()
	req.seq = len(h.log)
	h.log = append(h.log, req)
	h.byID[req.id] = append(h.byID[req.id], req.seq)
	h.mu.Unlock()
	select {
	case h.added <- struct{}{}:
	default:
	}
	if h.delay > 0 {
		time.Sleep(h.delay)
	}
	w.WriteHeader(http.StatusNoContent)
}

// received counts how many of ids the receiver logged at least once.
func (h *hookReceiver) received(ids []string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, id := range ids {
		if len(h.byID[id]) > 0 {
			n++
		}
	}
	return n
}

// snapshot returns a copy of the log.
func (h *hookReceiver) snapshot() ([]hookRequest, map[string][]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	byID := make(map[string][]int, len(h.byID))
	for id, xs := range h.byID {
		byID[id] = append([]int(nil), xs...)
	}
	return append([]hookRequest(nil), h.log...), byID
}

// verifySignature checks a request as docs/handlers.md ("The signature")
// specifies, written from that text and not from Herald's code: the key
// is the secret after "whsec_", base64-decoded; the signed content is
// "<webhook-id>.<webhook-timestamp>.<body>"; webhook-signature holds
// space-separated "v1,<base64 HMAC-SHA256>" values, one of which must
// match; the timestamp must be within five minutes of now.
func verifySignature(secret string, h http.Header, body []byte, now time.Time) bool {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || now.Sub(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return false
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, got := range strings.Split(sigs, " ") {
		if hmac.Equal([]byte(got), []byte(want)) {
			return true
		}
	}
	return false
}

// hookHandlers is the --handlers value of a webhook handler named hooks
// POSTing to url, with outage waits of at most outageMax. Its timeout, 1s,
// is far above the receiver's answer time, so no request times out (a
// timeout would send the record again) even on a busy machine; it makes
// the handler's lease 20s (4 × (4 × timeout + 1s), webhookhandler).
func hookHandlers(url, outageMax string) string {
	b, _ := json.Marshal([]map[string]any{{
		"name": "hooks", "type": "webhook", "url": url, "secret": hookSecret,
		"allow_private_network": true, "timeout": "1s",
		"outage_base_delay": "100ms", "outage_max_delay": outageMax,
	}})
	return string(b)
}
