package auth

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// jwksSource loads and caches a JWK Set from a URL or a file, reloading it
// on an interval and on demand (at most once per minRefresh).
type jwksSource struct {
	location   string // URL or file path; never logged for URLs beyond scheme+host
	isURL      bool
	client     *http.Client
	timeout    time.Duration
	refresh    time.Duration
	minRefresh time.Duration
	now        func() time.Time
	onResult   func(ok bool, keys int, err error)
	log        *slog.Logger
	// ticks, when set (tests), drives the reload loop instead of a ticker
	// of refresh.
	ticks <-chan time.Time

	keys atomic.Pointer[loadedKeys]

	// sem admits one reload at a time; waiters give up with their context.
	sem chan struct{}
	// lastAttempt is guarded by sem.
	lastAttempt time.Time
}

type loadedKeys struct {
	set *keySet
	at  time.Time
}

func newJWKSSource(cfg Config, onResult func(bool, int, error)) *jwksSource {
	loc := cfg.JWKS
	u := isURL(loc)
	if !u {
		loc = strings.TrimPrefix(loc, "file://")
	}
	return &jwksSource{
		location:   loc,
		isURL:      u,
		client:     cfg.HTTPClient,
		timeout:    cfg.JWKSFetchTimeout,
		refresh:    cfg.JWKSRefresh,
		minRefresh: cfg.JWKSMinRefresh,
		now:        cfg.Now,
		onResult:   onResult,
		log:        cfg.Logger,
		sem:        make(chan struct{}, 1),
	}
}

// current returns the loaded set (nil before the first successful load)
// and when it was loaded.
func (s *jwksSource) current() (*keySet, time.Time) {
	lk := s.keys.Load()
	if lk == nil {
		return nil, time.Time{}
	}
	return lk.set, lk.at
}

// stale reports whether the set was never loaded or is older than refresh.
func (s *jwksSource) stale() bool {
	_, at := s.current()
	return at.IsZero() || s.now().Sub(at) >= s.refresh
}

// reload loads the set unless another reload happened within minRefresh
// (force skips that limit: the service loop and Start use it). Concurrent
// callers share one reload: the second waits for the first and then finds
// the limit reached, or, with noWait, returns at once. A failed reload
// keeps the previous keys.
func (s *jwksSource) reload(ctx context.Context, force, noWait bool) error {
	if noWait {
		select {
		case s.sem <- struct{}{}:
		default:
			return nil
		}
	} else {
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("auth: jwks: wait for reload: %w", ctx.Err())
		}
	}
	defer func() { <-s.sem }()
	now := s.now()
	if !force && !s.lastAttempt.IsZero() && now.Sub(s.lastAttempt) < s.minRefresh {
		return nil
	}
	s.lastAttempt = now
	set, err := s.load(ctx)
	if err != nil {
		s.onResult(false, 0, err)
		return err
	}
	s.keys.Store(&loadedKeys{set: set, at: s.now()})
	s.onResult(true, set.len(), nil)
	s.warnSymmetric(set)
	return nil
}

func (s *jwksSource) load(ctx context.Context) (*keySet, error) {
	var data []byte
	if s.isURL {
		b, err := s.fetch(ctx)
		if err != nil {
			return nil, err
		}
		data = b
	} else {
		f, err := os.Open(s.location)
		if err != nil {
			return nil, fmt.Errorf("auth: jwks: open file: %w", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxJWKSBytes+1))
		if err != nil {
			return nil, fmt.Errorf("auth: jwks: read file: %w", err)
		}
		data = b
	}
	if len(data) > maxJWKSBytes {
		return nil, fmt.Errorf("auth: jwks: document larger than %d bytes", maxJWKSBytes)
	}
	set, skipped, err := parseJWKS(data)
	if err != nil {
		return nil, err
	}
	if set.len() == 0 {
		s.warnSymmetric(set)
		return nil, fmt.Errorf("auth: jwks: no usable key (%s)", strings.Join(skipped, "; "))
	}
	return set, nil
}

// warnSymmetric logs, on every load of a set that has them, that it
// publishes symmetric keys: they are refused, but the set leaks them.
func (s *jwksSource) warnSymmetric(set *keySet) {
	if set.symmetric > 0 {
		s.log.Warn("auth: the key set publishes symmetric (oct) keys; they are refused, but anyone who can read the set can mint tokens for any service that trusts them: remove and rotate them",
			"keys", set.symmetric)
	}
}

func (s *jwksSource) fetch(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.location, nil)
	if err != nil {
		return nil, fmt.Errorf("auth: jwks: build request: %w", err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("auth: jwks: fetch: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("auth: jwks: fetch: HTTP status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("auth: jwks: read body: %w", err)
	}
	return b, nil
}

// loop reloads every refresh interval until ctx ends.
func (s *jwksSource) loop(ctx context.Context) {
	ticks := s.ticks
	if ticks == nil {
		t := time.NewTicker(s.refresh)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			_ = s.reload(ctx, true, false)
		}
	}
}
