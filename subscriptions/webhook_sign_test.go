package subscriptions

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
)

// verifyingReceiver is an authorization webhook that checks signatures
// the way an application following docs/security.md would, with code of
// its own: it recomputes the HMAC over "id.timestamp.body" with its key,
// refuses a timestamp more than tolerance away, and refuses an id it has
// seen. It allows every verified request and records what it got.
type verifyingReceiver struct {
	*httptest.Server
	key       []byte
	tolerance time.Duration

	mu       sync.Mutex
	seenIDs  map[string]bool
	bodies   []map[string]string
	captured []*http.Request // the verified requests, with their bodies
	raw      [][]byte
	refused  []string
}

func newVerifyingReceiver(t *testing.T, key []byte) *verifyingReceiver {
	t.Helper()
	v := &verifyingReceiver{key: key, tolerance: 5 * time.Minute, seenIDs: map[string]bool{}}
	v.Server = httptest.NewServer(http.HandlerFunc(v.serve))
	t.Cleanup(v.Close)
	return v
}

func (v *verifyingReceiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	if why := v.check(r.Header, body); why != "" {
		v.mu.Lock()
		v.refused = append(v.refused, why)
		v.mu.Unlock()
		http.Error(w, why, http.StatusUnauthorized)
		return
	}
	var fields map[string]string
	if err := json.Unmarshal(body, &fields); err != nil {
		http.Error(w, "body", http.StatusBadRequest)
		return
	}
	v.mu.Lock()
	v.bodies = append(v.bodies, fields)
	v.captured = append(v.captured, r.Clone(context.Background()))
	v.raw = append(v.raw, body)
	v.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"allow":true,"ttl_seconds":60}`))
}

// check returns why a request is refused, or "".
func (v *verifyingReceiver) check(h http.Header, body []byte) string {
	id, ts, sigs := h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature")
	if id == "" || ts == "" || sigs == "" {
		return "unsigned"
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "bad timestamp"
	}
	if d := time.Since(time.Unix(sec, 0)); d > v.tolerance || d < -v.tolerance {
		return "timestamp outside the tolerance"
	}
	mac := hmac.New(sha256.New, v.key)
	fmt.Fprintf(mac, "%s.%s.", id, ts)
	mac.Write(body)
	want := mac.Sum(nil)
	ok := false
	for _, entry := range strings.Fields(sigs) {
		version, b64, found := strings.Cut(entry, ",")
		if !found || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			ok = true
		}
	}
	if !ok {
		return "signature does not verify"
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seenIDs[id] {
		return "replayed id"
	}
	v.seenIDs[id] = true
	return ""
}

// resend posts a captured request again, its headers kept and its body
// changed by edit.
func (v *verifyingReceiver) resend(t *testing.T, i int, edit func(h http.Header, body []byte) []byte) int {
	t.Helper()
	v.mu.Lock()
	r, body := v.captured[i], bytes.Clone(v.raw[i])
	v.mu.Unlock()
	h := r.Header.Clone()
	body = edit(h, body)
	req, err := http.NewRequest(http.MethodPost, v.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestWebhookRequestsAreSigned: with WebhookSecrets, every authorization
// webhook request carries Standard Webhooks signature headers that a
// receiver verifies with its own code, and sid and jti in its body; the
// same request replayed, replayed with a changed body, or signed with
// another key is refused by that receiver. Answers are cached per
// session, since the receiver may decide on it.
func TestWebhookRequestsAreSigned(t *testing.T) {
	key := bytes.Repeat([]byte("k"), 32)
	old := bytes.Repeat([]byte("o"), 32)
	recv := newVerifyingReceiver(t, key)
	// Two secrets, as during a rotation: the receiver knows only the new one.
	a := newWebhookAuthorizer(t, Config{WebhookURL: recv.URL, WebhookSecrets: [][]byte{old, key}})
	ctx := context.Background()
	for _, sid := range []string{"s-1", "s-2", "s-1"} {
		c := &auth.Claims{Subject: "alice", Tenant: "acme", SessionID: sid, TokenID: "j-" + sid}
		d, err := a.Authorize(ctx, Request{Claims: c, Channel: "docs/9"})
		if err != nil || !d.Allowed || d.Source != SourceWebhook {
			t.Fatalf("sid %s: %+v, %v (receiver refused: %v)", sid, d, err, recv.refused)
		}
	}
	recv.mu.Lock()
	bodies := recv.bodies
	recv.mu.Unlock()
	if len(bodies) != 2 {
		t.Fatalf("%d verified calls, want 2 (one per session; the third is cached): %v", len(bodies), bodies)
	}
	for i, sid := range []string{"s-1", "s-2"} {
		b := bodies[i]
		if b["tenant"] != "acme" || b["subject"] != "alice" || b["channel"] != "docs/9" || b["sid"] != sid || b["jti"] != "j-"+sid {
			t.Fatalf("call %d body %v, want tenant, subject, channel, sid %s, jti j-%s", i, b, sid, sid)
		}
	}

	for name, edit := range map[string]func(h http.Header, body []byte) []byte{
		"replayed as is": func(_ http.Header, body []byte) []byte { return body },
		"forged body": func(_ http.Header, body []byte) []byte {
			return bytes.Replace(body, []byte("docs/9"), []byte("docs/1"), 1)
		},
		"replayed with a fresh timestamp": func(h http.Header, body []byte) []byte {
			h.Set("Webhook-Timestamp", strconv.FormatInt(time.Now().Unix()+1, 10))
			return body
		},
	} {
		if status := recv.resend(t, 0, edit); status != http.StatusUnauthorized {
			t.Fatalf("%s: the receiver answered %d, want 401", name, status)
		}
	}

	// A Herald signing with a key the receiver does not know is refused.
	other := newWebhookAuthorizer(t, Config{WebhookURL: recv.URL, WebhookSecrets: [][]byte{old}})
	d, err := other.Authorize(ctx, Request{Claims: &auth.Claims{Subject: "bob", Tenant: "acme"}, Channel: "docs/9"})
	if err != nil || d.Allowed {
		t.Fatalf("signed with an unknown key: %+v, %v", d, err)
	}
	recv.mu.Lock()
	refused := strings.Join(recv.refused, "; ")
	recv.mu.Unlock()
	for _, want := range []string{"replayed id", "signature does not verify"} {
		if !strings.Contains(refused, want) {
			t.Fatalf("the receiver's refusals %q lack %q", refused, want)
		}
	}
}

// TestParseWebhookSecrets: a secret file holds whsec_ secrets, one a line,
// 24 to 64 bytes; anything else is refused with a message naming the
// line, never the secret.
func TestParseWebhookSecrets(t *testing.T) {
	k32 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	keys, err := ParseWebhookSecrets("# rotation\nwhsec_" + k32 + "\n\n  whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{8}, 24)) + "  \n")
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 || len(keys[1]) != 24 {
		t.Fatalf("keys %d, %v", len(keys), err)
	}
	for text, want := range map[string]string{
		"":                   "holds no secret",
		"# only a comment\n": "holds no secret",
		k32:                  `line 1 does not start with "whsec_"`,
		"whsec_!!!":          "not standard base64",
		"whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 16)):   "16 bytes, want 24 to 64",
		"\nwhsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 65)): "line 2 is 65 bytes",
	} {
		_, err := ParseWebhookSecrets(text)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", text, err, want)
		}
		if err != nil && strings.Contains(text, "whsec_") && strings.Contains(err.Error(), strings.TrimPrefix(strings.TrimSpace(text), "whsec_")) {
			t.Errorf("%q: the error echoes the secret: %v", text, err)
		}
	}
	if _, err := NewAuthorizer(Config{WebhookURL: "http://127.0.0.1:1/", WebhookSecrets: [][]byte{[]byte("short")}}); err == nil ||
		!strings.Contains(err.Error(), "WebhookSecrets[0] is 5 bytes") {
		t.Fatalf("a short secret in Config: %v", err)
	}
}
