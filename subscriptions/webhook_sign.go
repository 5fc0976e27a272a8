package subscriptions

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Authorization webhook requests are signed as the Standard Webhooks
// specification says (https://www.standardwebhooks.com), so a receiver can
// use any of its libraries, or a few lines of its own
// (docs/security.md#authorization-webhook-signatures):
//
//	webhook-id:        a unique id per request ("msg_" + 24 random bytes, base64url)
//	webhook-timestamp: Unix seconds when the request was signed
//	webhook-signature: "v1,<base64 of HMAC-SHA256(key, id + "." + timestamp + "." + body)>",
//	                   one space-separated entry per configured secret
//
// A receiver refuses a request whose signature does not verify with its
// secret, whose timestamp is more than a few minutes away from its clock
// (a replay of an old request), or whose id it has seen within that window.

// Signature header names.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// Webhook secret sizes: the Standard Webhooks range.
const (
	minWebhookSecret = 24
	maxWebhookSecret = 64
)

// webhookSecretPrefix starts a secret's text: the rest is its base64 key.
const webhookSecretPrefix = "whsec_"

// ParseWebhookSecrets reads the secrets of a webhook secret file: one
// "whsec_<base64 key>" per line, the key 24 to 64 bytes; blank lines and
// lines starting with "#" are skipped. Several secrets sign every request
// once each, so a secret can be rotated without a moment of refusals.
// Errors never contain a secret.
func ParseWebhookSecrets(text string) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		enc, ok := strings.CutPrefix(line, webhookSecretPrefix)
		if !ok {
			return nil, fmt.Errorf("subscriptions: webhook secret on line %d does not start with %q (make one with: echo %s$(openssl rand -base64 32))",
				i+1, webhookSecretPrefix, webhookSecretPrefix)
		}
		key, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return nil, fmt.Errorf("subscriptions: webhook secret on line %d: the part after %q is not standard base64", i+1, webhookSecretPrefix)
		}
		if len(key) < minWebhookSecret || len(key) > maxWebhookSecret {
			return nil, fmt.Errorf("subscriptions: webhook secret on line %d is %d bytes, want %d to %d", i+1, len(key), minWebhookSecret, maxWebhookSecret)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("subscriptions: the webhook secret file holds no secret")
	}
	return keys, nil
}

// signWebhook sets the signature headers of a request carrying body,
// signed at now with each of keys.
func signWebhook(h http.Header, keys [][]byte, body []byte, now time.Time) error {
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return fmt.Errorf("subscriptions: webhook: request id: %w", err)
	}
	id := "msg_" + base64.RawURLEncoding.EncodeToString(raw[:])
	ts := strconv.FormatInt(now.Unix(), 10)
	sigs := make([]string, 0, len(keys))
	for _, k := range keys {
		mac := hmac.New(sha256.New, k)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, ts)
	h.Set(HeaderWebhookSignature, strings.Join(sigs, " "))
	return nil
}
