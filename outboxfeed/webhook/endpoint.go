package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"
)

// ExcerptBytes bounds the response-body excerpt of a StatusError (and
// its Location and Retry-After).
const ExcerptBytes = 256

// DrainBytes is the most of a response body read after its excerpt, so
// the connection can carry the next request; a longer body closes the
// connection instead.
const DrainBytes = 64 << 10

// UserAgent is the User-Agent header of every request.
const UserAgent = "Herald-Webhooks/1"

// Endpoint delivers Messages to one webhook endpoint. It is safe for
// concurrent use; at most MaxInFlight requests are under way at once
// (Deliver waits for a slot). Close it when done.
type Endpoint struct {
	cfg       Config
	sched     Schedule
	url       *url.URL
	signer    *Signer
	transport *http.Transport
	template  *http.Request // method, url, host
	sigSize   int           // the length of the webhook-signature value
	slots     chan struct{}
}

// New checks cfg (defaults applied), reads its secret_file and ca_file
// and returns an Endpoint with its own connection pool. Errors wrap
// ErrInvalidConfig and name the key at fault.
func New(cfg Config) (*Endpoint, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	u, _ := parseURL(cfg.URL) // validated
	secrets, err := cfg.loadSecrets()
	if err != nil {
		return nil, err
	}
	signer, err := NewSigner(secrets...)
	if err != nil {
		return nil, invalidConfig(cfg.Name, "secrets: %v", err)
	}
	roots, err := cfg.loadCA()
	if err != nil {
		return nil, err
	}
	e := &Endpoint{
		cfg:       cfg,
		sched:     cfg.Schedule(),
		url:       u,
		signer:    signer,
		transport: newTransport(cfg, roots),
		slots:     make(chan struct{}, cfg.MaxInFlight),
		// "v1," and 44 base64 characters per secret, a space between.
		sigSize: 48*len(secrets) - 1,
	}
	e.template = &http.Request{
		Method: http.MethodPost, URL: u, Host: u.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}
	return e, nil
}

// newTransport is the endpoint's own connection pool: keep-alive on, as
// many idle connections kept as requests may be in flight, HTTP/2 when the
// server offers it over TLS, no proxy (a proxy would be dialled instead of
// the endpoint and escape the address check), and every connection's
// address checked when it is dialled.
func newTransport(cfg Config, roots *x509.CertPool) *http.Transport {
	dialer := &net.Dialer{
		Timeout:   cfg.Timeout,
		KeepAlive: 30 * time.Second,
	}
	if !cfg.AllowPrivateNetwork {
		dialer.Control = refuseSpecial
	}
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		TLSClientConfig:        &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    cfg.Timeout,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           cfg.MaxInFlight,
		MaxIdleConnsPerHost:    cfg.MaxInFlight,
		MaxConnsPerHost:        cfg.MaxInFlight,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  0,
		MaxResponseHeaderBytes: 64 << 10,
		DisableCompression:     true,
	}
}

// Name is the handler's name.
func (e *Endpoint) Name() string { return e.cfg.Name }

// Config returns the Endpoint's settings, defaults applied. Its secrets
// print redacted.
func (e *Endpoint) Config() Config { return e.cfg }

// Schedule returns the Endpoint's retry schedule.
func (e *Endpoint) Schedule() Schedule { return e.sched }

// String describes the Endpoint without its secrets or its url's query.
func (e *Endpoint) String() string {
	return fmt.Sprintf("webhook %s → %s://%s%s", e.cfg.Name, e.url.Scheme, e.url.Host, e.url.EscapedPath())
}

// GoString is String (the %#v verb).
func (e *Endpoint) GoString() string { return e.String() }

// Format prints String for every verb, so no formatting reaches the
// secrets in the Endpoint's unexported settings.
func (e *Endpoint) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		_, _ = fmt.Fprintf(f, "%q", e.String())
		return
	}
	_, _ = f.Write([]byte(e.String()))
}

// Close closes the idle connections. Requests under way finish; the
// Endpoint stays usable (new connections are dialled as needed).
func (e *Endpoint) Close() { e.transport.CloseIdleConnections() }

// signSpace is the room AppendSign takes after the body: the signed
// prefix "<id>.<timestamp>." (scratch) and the header value.
func signSpace(idLen, sigSize int) int { return idLen + 22 + sigSize }

// bodySizeHint is an upper estimate of m's body size when its strings
// need no escaping and its JSON no compacting.
func bodySizeHint(m *Message) int {
	return 160 + len(m.ID) + len(m.Tenant) + len(m.Channel) + len(m.Kind) + len(m.Type) + len(m.Freshness) + len(m.Data)
}

// Deliver POSTs m to the endpoint once, signed, and classifies the outcome.
// It waits for one of MaxInFlight slots first. The request, its answer and
// reading at most ExcerptBytes+DrainBytes of the body are bounded by the
// Config's Timeout; ctx ending returns ClassCanceled.
func (e *Endpoint) Deliver(ctx context.Context, m Message) Result {
	select {
	case e.slots <- struct{}{}:
	case <-ctx.Done():
		return Result{Class: ClassCanceled, Reason: ReasonCanceled, Err: fmt.Errorf("webhook: waiting for a slot: %w", context.Cause(ctx))}
	}
	defer func() { <-e.slots }()

	// The body is not recycled: the Transport may still read it after Do
	// returns (RoundTrip closes a request body asynchronously). The
	// signature is appended after it in the same buffer, then copied out.
	buf, err := AppendBody(make([]byte, 0, bodySizeHint(&m)+signSpace(len(m.ID), e.sigSize)), &m)
	if err != nil {
		return Result{Class: ClassPermanent, Reason: ReasonInvalidMessage, Err: err}
	}
	n := len(buf)
	body := buf[:n:n]
	ts := time.Now().Unix()
	buf = e.signer.AppendSign(buf, m.ID, ts, body)
	sig := string(buf[n:])

	rctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	req := e.newRequest(rctx, body, m.ID, ts, sig)
	start := time.Now()
	// The Transport itself, not an http.Client: redirects are not followed
	// (Standard Webhooks: a 3xx is a failure, classified as it is), and
	// nothing needs the Client's per-request copies of the headers.
	resp, err := e.transport.RoundTrip(req)
	if err != nil {
		r := e.failed(ctx, err)
		r.Timestamp, r.Duration = ts, time.Since(start)
		return r
	}
	r := e.answered(resp)
	r.Timestamp, r.Duration = ts, time.Since(start)
	return r
}

// The header values every request has.
var (
	jsonContentType = []string{"application/json"}
	userAgent       = []string{UserAgent}
)

// newRequest builds the POST from the Endpoint's template (its url is
// parsed once).
func (e *Endpoint) newRequest(ctx context.Context, body []byte, id string, ts int64, sig string) *http.Request {
	vals := make([]string, 3) // one allocation for the values of this request
	vals[0], vals[1], vals[2] = id, strconv.FormatInt(ts, 10), sig
	h := make(http.Header, 6)
	h["Content-Type"] = jsonContentType // the same for every request: the Transport only reads them
	h["User-Agent"] = userAgent
	h["Webhook-Id"] = vals[0:1:1]
	h["Webhook-Timestamp"] = vals[1:2:2]
	h["Webhook-Signature"] = vals[2:3:3]
	// A nil Idempotency-Key is sent as nothing but lets the Transport send
	// the request again on a fresh connection when a kept-alive one turned
	// out to be closed: a webhook is idempotent by its webhook-id.
	h["Idempotency-Key"] = nil
	req := e.template.WithContext(ctx) // a copy
	req.Header = h
	// io.NopCloser of a *bytes.Reader is a body the Transport knows to be
	// in memory: it writes it with the headers in one write, where any
	// other reader gets the headers flushed first, in a packet of their
	// own.
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	req.ContentLength = int64(len(body))
	return req
}

// answered classifies an answer and reads (bounded) and closes its body.
func (e *Endpoint) answered(resp *http.Response) Result {
	defer resp.Body.Close()
	st := resp.StatusCode
	r := Result{Status: st}
	if v := resp.Header.Get("Retry-After"); v != "" {
		if d, ok := ParseRetryAfter(v, time.Now()); ok {
			r.RetryAfter = min(d, e.cfg.RetryAfterMax)
		}
	}
	if st >= 200 && st <= 299 {
		r.Class, r.Reason = ClassDelivered, ReasonAccepted
		drain(resp.Body)
		return r
	}
	var head [ExcerptBytes + utf8.UTFMax]byte
	n, _ := io.ReadFull(resp.Body, head[:])
	drain(resp.Body)
	se := &StatusError{Status: st, Excerpt: sanitize(head[:n])}
	if v := resp.Header.Get("Retry-After"); v != "" {
		se.RetryAfter = sanitize([]byte(v))
	}
	r.Err = se
	switch {
	case st == http.StatusGone:
		r.Class, r.Reason = ClassGone, ReasonGone
	case st == http.StatusTooManyRequests:
		r.Class, r.Reason = ClassOutage, ReasonThrottled
	case st == http.StatusBadGateway || st == http.StatusServiceUnavailable || st == http.StatusGatewayTimeout:
		r.Class, r.Reason = ClassOutage, ReasonUnavailable
	case st >= 300 && st <= 399:
		se.Location = sanitize([]byte(resp.Header.Get("Location")))
		r.Class, r.Reason = ClassPermanent, ReasonRedirect
	case st >= 400 && st <= 499:
		r.Class, r.Reason = ClassPermanent, ReasonClientError
	case st >= 500 && st <= 599:
		r.Class, r.Reason = ClassRetryable, ReasonServerError
	default:
		r.Class, r.Reason = ClassRetryable, ReasonUnexpectedStatus
	}
	return r
}

// drain reads what is left of a body, up to DrainBytes, so a kept-alive
// connection can be reused; a longer body (or one cut by the timeout)
// makes Close drop the connection instead.
func drain(body io.Reader) {
	_, _ = io.CopyN(io.Discard, body, DrainBytes)
}

// failed classifies a request that got no answer.
func (e *Endpoint) failed(ctx context.Context, err error) Result {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // url.Error repeats the url, query included
	}
	outage := func(reason Reason, err error) Result {
		return Result{Class: ClassOutage, Reason: reason, Err: err}
	}
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var hostErr x509.HostnameError
	var authErr x509.UnknownAuthorityError
	var invalidErr x509.CertificateInvalidError
	var recErr tls.RecordHeaderError
	var alertErr tls.AlertError
	switch {
	case ctx.Err() != nil:
		return Result{Class: ClassCanceled, Reason: ReasonCanceled, Err: fmt.Errorf("webhook: POST canceled: %w", context.Cause(ctx))}
	case errors.Is(err, ErrAddressRefused):
		return outage(ReasonAddressRefused, fmt.Errorf("webhook: POST: %w", err))
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return outage(ReasonTimeout, fmt.Errorf("%w: no answer within timeout %v (%v)", ErrTimeout, e.cfg.Timeout, err))
	case errors.As(err, &dnsErr):
		return outage(ReasonDNS, fmt.Errorf("webhook: POST: %w", err))
	case errors.Is(err, syscall.ECONNREFUSED):
		return outage(ReasonRefused, fmt.Errorf("webhook: POST: %w", err))
	case errors.As(err, &certErr), errors.As(err, &hostErr), errors.As(err, &authErr), errors.As(err, &invalidErr),
		errors.As(err, &recErr), errors.As(err, &alertErr):
		return outage(ReasonTLS, fmt.Errorf("webhook: POST: TLS: %w", err))
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, net.ErrClosed):
		return outage(ReasonReset, fmt.Errorf("webhook: POST: %w", err))
	}
	return outage(ReasonNetwork, fmt.Errorf("webhook: POST: %w", err))
}

// isTimeout reports a net.Error timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// sanitize returns b as at most ExcerptBytes of valid UTF-8, invalid
// sequences as U+FFFD, control characters (NUL, newlines, DEL, C1) as
// spaces, surrounding spaces trimmed, cut on a character boundary.
func sanitize(b []byte) string {
	out := make([]byte, 0, min(len(b), ExcerptBytes))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		b = b[n:]
		switch {
		case r == utf8.RuneError && n <= 1:
			r = utf8.RuneError
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029':
			r = ' '
		}
		if len(out)+utf8.RuneLen(r) > ExcerptBytes {
			break
		}
		out = utf8.AppendRune(out, r)
	}
	return string(bytes.TrimSpace(out))
}
