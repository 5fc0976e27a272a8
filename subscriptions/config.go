package subscriptions

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for Config.
const (
	DefaultWebhookTimeout     = 2 * time.Second
	DefaultWebhookTTL         = time.Minute
	DefaultWebhookMaxTTL      = time.Hour
	DefaultWebhookCacheSize   = 10_000
	DefaultWebhookMaxInFlight = 64
)

// Config configures an Authorizer built by NewAuthorizer. The zero Config
// (like the zero Authorizer) checks connection-token grants only.
type Config struct {
	// SubTokens verifies subscription tokens (auth.Verifier satisfies it).
	// Default nil: subscription tokens are not accepted.
	SubTokens SubTokenVerifier

	// Revocations, when set, is asked whether a subscription token's sid or
	// jti is revoked (an auth.RevocationStore satisfies it); a failed check
	// denies. Default nil: not asked (the gateway checks connection claims).
	Revocations RevocationChecker

	// WebhookURL is the authorization webhook, an http(s) URL receiving
	// POST {"tenant","subject","channel"}. Default "": no webhook.
	WebhookURL string

	// WebhookHeader is sent with every webhook request, e.g. an
	// Authorization header the webhook checks. Default none.
	WebhookHeader http.Header

	// WebhookSecrets sign every webhook request as Standard Webhooks
	// says (webhook-id, webhook-timestamp, webhook-signature: one
	// HMAC-SHA256 per secret over id, timestamp and body), so the
	// application can refuse forged and replayed calls; each key is 24 to
	// 64 bytes (ParseWebhookSecrets reads them from a secret file).
	// Default none: requests are unsigned.
	WebhookSecrets [][]byte

	// WebhookTimeout bounds one webhook call, including waiting for a free
	// call slot. Default 2s.
	WebhookTimeout time.Duration

	// WebhookDefaultTTL is how long an answer is cached (and when an
	// allowed subscription is rechecked) when it has no positive
	// ttl_seconds. Default 1m.
	WebhookDefaultTTL time.Duration

	// WebhookMaxTTL caps ttl_seconds. Default 1h.
	WebhookMaxTTL time.Duration

	// WebhookCacheSize bounds the cached answers, one per (tenant, subject,
	// channel). Default 10000.
	WebhookCacheSize int

	// WebhookMaxInFlight bounds concurrent webhook calls; a call waiting
	// longer than WebhookTimeout for a slot fails closed. Default 64.
	WebhookMaxInFlight int

	// HTTPClient makes webhook calls. Default: a client of its own (each
	// call is bounded by WebhookTimeout through its context).
	HTTPClient *http.Client

	// Logger receives webhook failures, at most one line a second.
	// Default: discard.
	Logger *slog.Logger

	// Registerer receives the subscription metrics. Default nil: not
	// registered.
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	c.WebhookTimeout = cmp.Or(c.WebhookTimeout, DefaultWebhookTimeout)
	c.WebhookDefaultTTL = cmp.Or(c.WebhookDefaultTTL, DefaultWebhookTTL)
	c.WebhookMaxTTL = cmp.Or(c.WebhookMaxTTL, max(DefaultWebhookMaxTTL, c.WebhookDefaultTTL))
	c.WebhookCacheSize = cmp.Or(c.WebhookCacheSize, DefaultWebhookCacheSize)
	c.WebhookMaxInFlight = cmp.Or(c.WebhookMaxInFlight, DefaultWebhookMaxInFlight)
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if c.WebhookURL != "" {
		u, err := url.Parse(c.WebhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("subscriptions: config: WebhookURL must be an absolute http(s) URL")
		}
	}
	if c.WebhookTimeout < 0 || c.WebhookTimeout > time.Minute {
		return fmt.Errorf("subscriptions: config: WebhookTimeout %s is outside (0, 1m]", c.WebhookTimeout)
	}
	if c.WebhookDefaultTTL < 0 {
		return fmt.Errorf("subscriptions: config: WebhookDefaultTTL %s is negative", c.WebhookDefaultTTL)
	}
	if c.WebhookMaxTTL < c.WebhookDefaultTTL {
		return fmt.Errorf("subscriptions: config: WebhookMaxTTL %s is below WebhookDefaultTTL %s", c.WebhookMaxTTL, c.WebhookDefaultTTL)
	}
	for i, k := range c.WebhookSecrets {
		if len(k) < minWebhookSecret || len(k) > maxWebhookSecret {
			return fmt.Errorf("subscriptions: config: WebhookSecrets[%d] is %d bytes, want %d to %d", i, len(k), minWebhookSecret, maxWebhookSecret)
		}
	}
	if c.WebhookCacheSize < 1 {
		return fmt.Errorf("subscriptions: config: WebhookCacheSize must be positive, got %d", c.WebhookCacheSize)
	}
	if c.WebhookMaxInFlight < 1 {
		return fmt.Errorf("subscriptions: config: WebhookMaxInFlight must be positive, got %d", c.WebhookMaxInFlight)
	}
	return nil
}
