package subscriptions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
)

// maxWebhookAnswer bounds the webhook answer body read.
const maxWebhookAnswer = 64 << 10

// maxWebhookReason bounds the webhook's reason passed on to clients.
const maxWebhookReason = 200

// ReasonWebhookUnavailable is the denial reason when the webhook cannot be
// reached, times out, or answers something other than a valid 200.
const ReasonWebhookUnavailable = "authorization webhook unavailable"

// webhookRequest is the JSON body POSTed to the webhook.
type webhookRequest struct {
	Tenant  string `json:"tenant"`
	Subject string `json:"subject"`
	Channel string `json:"channel"`
	// SessionID and TokenID are the connection token's sid and jti, when
	// it has them, so the application can decide on sessions.
	SessionID string `json:"sid,omitempty"`
	TokenID   string `json:"jti,omitempty"`
}

// webhookResponse is the JSON answer expected from the webhook.
type webhookResponse struct {
	Allow      *bool    `json:"allow"`
	TTLSeconds *float64 `json:"ttl_seconds"`
	Reason     string   `json:"reason"`
}

// webhook calls the authorization webhook, caching answers per key and
// sharing one in-flight call among concurrent requests for the same key.
type webhook struct {
	url        string
	header     http.Header
	secrets    [][]byte // signing keys; none: unsigned
	client     *http.Client
	timeout    time.Duration
	defaultTTL time.Duration
	maxTTL     time.Duration
	slots      chan struct{}
	cache      *answerCache
	now        func() time.Time
	log        *slog.Logger
	lastLog    atomic.Int64
	m          *metrics

	mu       sync.Mutex
	inflight map[webhookKey]*webhookCall
}

type webhookCall struct {
	done chan struct{}
	out  webhookOutcome
}

// webhookOutcome is a cached or fresh answer, or why there is none.
type webhookOutcome struct {
	answer  cachedAnswer
	failure error // the call failed: deny with ReasonWebhookUnavailable
}

func newWebhook(cfg Config, m *metrics) *webhook {
	return &webhook{
		url:        cfg.WebhookURL,
		header:     cfg.WebhookHeader.Clone(),
		secrets:    slices.Clone(cfg.WebhookSecrets),
		client:     cfg.HTTPClient,
		timeout:    cfg.WebhookTimeout,
		defaultTTL: cfg.WebhookDefaultTTL,
		maxTTL:     cfg.WebhookMaxTTL,
		slots:      make(chan struct{}, cfg.WebhookMaxInFlight),
		cache:      newAnswerCache(cfg.WebhookCacheSize),
		now:        time.Now,
		log:        cfg.Logger,
		m:          m,
		inflight:   make(map[webhookKey]*webhookCall),
	}
}

// decide returns the webhook's answer for k: from the cache, from a call
// already in flight for k, or from a new call. The wait ends when the call
// does (at most the webhook timeout) or when ctx ends, whichever is first;
// the error is non-nil only when ctx ended. A failed call is not cached.
func (w *webhook) decide(ctx context.Context, k webhookKey) (webhookOutcome, error) {
	if a, ok := w.cache.get(k, w.now()); ok {
		w.m.webhookCacheHit()
		return webhookOutcome{answer: a}, nil
	}
	w.mu.Lock()
	call, shared := w.inflight[k]
	if !shared {
		call = &webhookCall{done: make(chan struct{})}
		w.inflight[k] = call
		go w.run(k, call)
	}
	w.mu.Unlock()
	select {
	case <-call.done:
		return call.out, nil
	case <-ctx.Done():
		return webhookOutcome{}, ctx.Err()
	}
}

// run makes one call for k with its own deadline, so that no caller's
// cancellation spoils the answer others wait for.
func (w *webhook) run(k webhookKey, call *webhookCall) {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	start := time.Now()
	ans, err := w.call(ctx, k)
	w.m.webhookResult(ans.allow, err, time.Since(start))
	if err != nil {
		w.logFailure(k, err)
		call.out.failure = err
	} else {
		call.out.answer = w.cache.put(k, ans, w.now())
	}
	w.mu.Lock()
	delete(w.inflight, k)
	w.mu.Unlock()
	close(call.done)
}

func (w *webhook) call(ctx context.Context, k webhookKey) (webhookAnswer, error) {
	select {
	case w.slots <- struct{}{}:
		defer func() { <-w.slots }()
	case <-ctx.Done():
		return webhookAnswer{}, fmt.Errorf("subscriptions: webhook: no free call slot: %w", ctx.Err())
	}
	body, err := json.Marshal(webhookRequest{Tenant: k.tenant, Subject: k.subject, Channel: k.channel, SessionID: k.sid, TokenID: k.jti})
	if err != nil {
		return webhookAnswer{}, fmt.Errorf("subscriptions: webhook: encode: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return webhookAnswer{}, fmt.Errorf("subscriptions: webhook: build request: %w", err)
	}
	for name, vals := range w.header {
		req.Header[name] = vals
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if len(w.secrets) > 0 {
		if err := signWebhook(req.Header, w.secrets, body, w.now()); err != nil {
			return webhookAnswer{}, err
		}
	}
	resp, err := w.client.Do(req)
	if err != nil {
		var ue *url.Error // drop the URL, which may carry a credential
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return webhookAnswer{}, fmt.Errorf("subscriptions: webhook: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxWebhookAnswer))
		return webhookAnswer{}, fmt.Errorf("subscriptions: webhook: HTTP status %d", resp.StatusCode)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxWebhookAnswer+1))
	if err != nil {
		return webhookAnswer{}, fmt.Errorf("subscriptions: webhook: read answer: %w", err)
	}
	if len(raw) > maxWebhookAnswer {
		return webhookAnswer{}, fmt.Errorf("subscriptions: webhook: answer larger than %d bytes", maxWebhookAnswer)
	}
	var r webhookResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return webhookAnswer{}, fmt.Errorf("subscriptions: webhook: answer is not the expected JSON object: %w", err)
	}
	if r.Allow == nil {
		return webhookAnswer{}, errors.New(`subscriptions: webhook: answer has no boolean "allow"`)
	}
	ttl := w.defaultTTL
	if r.TTLSeconds != nil && *r.TTLSeconds > 0 {
		ttl = min(time.Duration(*r.TTLSeconds*float64(time.Second)), w.maxTTL)
		if ttl <= 0 { // overflowed
			ttl = w.maxTTL
		}
	}
	return webhookAnswer{allow: *r.Allow, ttl: ttl, reason: cleanReason(r.Reason)}, nil
}

// cleanReason keeps a webhook's reason printable and short.
func cleanReason(s string) string {
	s = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, s)
	if len(s) > maxWebhookReason {
		cut := maxWebhookReason
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// logFailure logs a webhook failure at most once a second.
func (w *webhook) logFailure(k webhookKey, err error) {
	now := time.Now().UnixNano()
	last := w.lastLog.Load()
	if now-last < int64(time.Second) || !w.lastLog.CompareAndSwap(last, now) {
		return
	}
	w.log.Warn("subscriptions: authorization webhook failed; denying",
		slog.String("tenant", k.tenant), slog.String("channel", k.channel), slog.String("error", err.Error()))
}
