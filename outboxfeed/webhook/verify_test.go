package webhook

// The receiver's verification below is docs/handlers.md's Go snippet,
// word for word (TestDocsGoSnippetIsTheVerifier checks it). It is written
// from the Standard Webhooks specification and shares no code with the
// package: the tests check the package's signatures with it.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// BEGIN verifyWebhook
// verifyWebhook returns nil when the request carries a signature made with
// one of secrets (the whsec_… values) and a timestamp within five minutes
// of now. body is the request body exactly as received.
func verifyWebhook(secrets []string, h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not a number")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("webhook-timestamp is more than 5 minutes away")
	}
	signed := append([]byte(id+"."+ts+"."), body...)
	for _, secret := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil {
			return errors.New("a secret is not whsec_<base64>")
		}
		mac := hmac.New(sha256.New, key)
		mac.Write(signed)
		want := []byte("v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)))
		for _, got := range strings.Split(sigs, " ") {
			if hmac.Equal([]byte(got), want) {
				return nil
			}
		}
	}
	return errors.New("no valid signature")
}

// END verifyWebhook
