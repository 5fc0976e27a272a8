package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Standard Webhooks reference test vector (the specification's
// libraries test against it).
func TestSignReferenceVector(t *testing.T) {
	s, err := NewSigner("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := s.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %s; want %s", got, want)
	}
}

// AppendSign leaves dst's content alone and appends only the header.
func TestAppendSignKeepsPrefix(t *testing.T) {
	s, err := NewSigner(testSecretA, testSecretB)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"a":1}`)
	out := s.AppendSign([]byte("head:"), "id1", 1700000000, body)
	want := "head:" + s.Sign("id1", 1700000000, body)
	if string(out) != want {
		t.Fatalf("AppendSign = %q; want %q", out, want)
	}
	if n := len(strings.Split(strings.TrimPrefix(string(out), "head:"), " ")); n != 2 {
		t.Fatalf("%d signatures for 2 secrets", n)
	}
}

// Every delivered request passes the independent verifier: the headers,
// the body exactly as sent, and the signing rules of the specification.
func TestDeliverVerifiesIndependently(t *testing.T) {
	rc := newReceiver(t, nil)
	e := newEndpoint(t, testConfig(rc.URL))
	before := time.Now().Unix()
	m := testMessage("0f8fad5b-d9cb-469f-a165-70867728950e")
	wantClass(t, deliver(t, e, m), ClassDelivered, ReasonAccepted)
	after := time.Now().Unix()
	got := rc.got()
	if len(got) != 1 {
		t.Fatalf("%d requests", len(got))
	}
	r := got[0]
	if err := verifyWebhook([]string{string(testSecretA)}, r.Header, r.Body, time.Now()); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if err := verifyWebhook([]string{string(testSecretB)}, r.Header, r.Body, time.Now()); err == nil {
		t.Fatal("a receiver with another secret accepted the request")
	}
	tampered := bytes.Replace(r.Body, []byte("1250"), []byte("9999"), 1)
	if err := verifyWebhook([]string{string(testSecretA)}, r.Header, tampered, time.Now()); err == nil {
		t.Fatal("a tampered body was accepted")
	}
	if err := verifyWebhook([]string{string(testSecretA)}, r.Header, r.Body, time.Now().Add(10*time.Minute)); err == nil {
		t.Fatal("a stale timestamp was accepted")
	}
	if id := r.Header.Get("webhook-id"); id != m.ID {
		t.Fatalf("webhook-id %q; want %q", id, m.ID)
	}
	ts, err := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
	if err != nil || ts < before || ts > after {
		t.Fatalf("webhook-timestamp %q not within [%d, %d]", r.Header.Get("webhook-timestamp"), before, after)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var env map[string]any
	if err := json.Unmarshal(r.Body, &env); err != nil {
		t.Fatalf("body is not JSON: %v", err)
	}
	if env["id"] != m.ID {
		t.Fatalf("body id %v", env["id"])
	}
}

// During a rotation the endpoint signs with both secrets: a receiver that
// knows only the old one, only the new one, or both accepts; one that knows
// neither refuses.
func TestSecretRotation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		knows   []string
		accepts bool
	}{
		{"old only", []string{string(testSecretA)}, true},
		{"new only", []string{string(testSecretB)}, true},
		{"both", []string{string(testSecretB), string(testSecretA)}, true},
		{"neither", []string{string(testSecretC)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The receiver checks each request with its own verifier, as a
			// real one does, and answers 401 when it fails.
			rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
				if err := verifyWebhook(tc.knows, r.Header, lastBody(r), time.Now()); err != nil {
					http.Error(w, err.Error(), http.StatusUnauthorized)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			})
			cfg := testConfig(rc.URL)
			cfg.Secret, cfg.Secrets = "", []Secret{testSecretA, testSecretB}
			e := newEndpoint(t, cfg)
			res := deliver(t, e, testMessage("msg-rotation"))
			if tc.accepts {
				wantClass(t, res, ClassDelivered, ReasonAccepted)
			} else {
				wantClass(t, res, ClassPermanent, ReasonClientError)
				if res.Status != http.StatusUnauthorized || !strings.Contains(res.Err.Error(), "no valid signature") {
					t.Fatalf("status %d, err %v", res.Status, res.Err)
				}
			}
			sigs := strings.Split(rc.got()[0].Header.Get("webhook-signature"), " ")
			if len(sigs) != 2 {
				t.Fatalf("webhook-signature has %d entries; want 2", len(sigs))
			}
		})
	}
}

// The id is the same on every retry of a record; the timestamp is the
// attempt's.
func TestWebhookIDStableAcrossRetries(t *testing.T) {
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	e := newEndpoint(t, testConfig(rc.URL))
	m := testMessage("msg-stable")
	for range 3 {
		wantClass(t, deliver(t, e, m), ClassRetryable, ReasonServerError)
	}
	got := rc.got()
	for i, r := range got {
		if id := r.Header.Get("webhook-id"); id != m.ID {
			t.Fatalf("request %d: webhook-id %q", i, id)
		}
		if !bytes.Equal(r.Body, got[0].Body) {
			t.Fatalf("request %d: body differs from the first", i)
		}
		if err := verifyWebhook([]string{string(testSecretA)}, r.Header, r.Body, time.Now()); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
}
