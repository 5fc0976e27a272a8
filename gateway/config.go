package gateway

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/sse"
	"github.com/heraldgw/herald/gateway/internal/ws"
)

// Config holds the gateway's settings. The zero value of every field means
// its documented default; withDefaults fills them and validate checks them.
type Config struct {
	// Listen is the TCP address Start listens on. Default "127.0.0.1:8080".
	Listen string

	// HeaderTimeout bounds how long a client may take to send a request's
	// line and headers (http.Server.ReadHeaderTimeout); a client slower
	// than that, such as one that sends half a request line and stops, has
	// its TCP connection closed (after net/http's 400 Bad Request). Only
	// Start uses it: a Handler mounted elsewhere gets its server's.
	// Default 10s.
	HeaderTimeout time.Duration

	// MaxConnections bounds concurrent realtime connections (all transports)
	// on this host; a stream beyond it is refused with 503
	// too_many_connections. Default 10000.
	MaxConnections int

	// MaxSubscriptions bounds the channels one connection may subscribe to;
	// for SSE, the channels named by one request. Default 128.
	MaxSubscriptions int

	// QueueMaxBytes bounds the bytes of publications waiting to be written to
	// one connection, including the batch being written. A connection beyond
	// it drops its queue and catches up from the channel history (closed as
	// "slow" only when it falls behind the history). Default 1 MiB.
	QueueMaxBytes int

	// HistorySize is how many publications of a channel the broker's
	// history holds (fanout's HistorySize; herald serve passes
	// --history-size). A connection whose queue overflows while it is more
	// than this many publications behind on the channel is closed as
	// "slow" at once: it can no longer catch up, and a client that stopped
	// reading altogether is let go without waiting for WriteTimeout.
	// Default 0: unknown; such a connection ends when it reads again and
	// finds the history gone, or when a write to it times out.
	HistorySize int

	// HistoryTTL is how long the broker keeps the history of an idle
	// channel (fanout's HistoryTTL; herald serve passes --history-ttl).
	// With HistorySize it is announced in the WebSocket connect reply, so
	// a client knows how long a resume position stays useful. Default 0:
	// unknown, not announced.
	HistoryTTL time.Duration

	// Version is the server's release, announced in the WebSocket connect
	// reply. Default "dev".
	Version string

	// QueueMaxMessages bounds the number of publications waiting to be
	// written to one connection, including the batch being written. A
	// connection beyond it catches up from the channel history, as for
	// QueueMaxBytes, reading half this many at a time. Default 1024.
	QueueMaxMessages int

	// WriteTimeout is the deadline for writing and flushing one batch to a
	// connection; a connection that misses it is closed with the reason
	// "write_timeout". An HTTP/1.1 SSE stream keeps a deadline it set for
	// an earlier batch when it is at most WriteTimeout/16 sooner, so a
	// batch there has at least 15/16 of it. Default 10s.
	WriteTimeout time.Duration

	// HeartbeatInterval is how often an SSE stream carries a ": ping" comment
	// (and a WebSocket connection an application ping). Default 15s.
	HeartbeatInterval time.Duration

	// SSERetry is the reconnection delay sent in the SSE "retry:" field.
	// Default 2s.
	SSERetry time.Duration

	// ClientTimeout is how long a client may stay silent before it is
	// considered gone (WebSocket). SSE clients never send: a dead SSE client
	// is found when a heartbeat cannot be written within WriteTimeout.
	// Must exceed HeartbeatInterval. Default 60s.
	ClientTimeout time.Duration

	// DisableAccessTokenQuery turns off the access_token query parameter,
	// leaving the Authorization header and the cookie. Default false: the
	// parameter is accepted (EventSource cannot send headers) and is never
	// logged.
	DisableAccessTokenQuery bool

	// CookieName is the cookie a token is read from. Default "herald_token".
	CookieName string

	// AdminToken turns on the read-only operator view: GET /ops/ serves its
	// page, and GET /ops/status, sent "Authorization: Bearer <AdminToken>",
	// answers readiness, connections and the outbox backlog. It is a
	// secret like the HMAC key. When set, it must be at least
	// MinAdminTokenLen (16) bytes of visible ASCII. Default empty: the
	// operator view is off and its routes answer 404.
	AdminToken string

	// ShutdownReconnectDelay is the largest reconnect delay told to clients on
	// graceful shutdown; each stream gets a random delay in [0, it] so a
	// restart does not cause a reconnect storm. Default 5s.
	ShutdownReconnectDelay time.Duration

	// ShutdownTimeout bounds how long Stop waits for streams to write their
	// final event and for in-flight requests to finish before closing the
	// remaining connections. Default 10s.
	ShutdownTimeout time.Duration

	// AllowedOrigins lists the browser origins, besides the request's own
	// host, that may open a WebSocket (the defence against cross-site
	// WebSocket hijacking) and whose pages may call /v1/sse and /v1/tickets
	// cross-origin (CORS, credentials included; see cors). Each entry is a
	// host pattern ("app.example.com",
	// "*.example.com") or, when it holds "://", a scheme://host pattern,
	// matched case-insensitively with path.Match; "*" allows every origin.
	// A request without an Origin header (not a browser) is always allowed.
	// Default none: same host only.
	AllowedOrigins []string

	// MaxMessageSize bounds one WebSocket message a client sends, in bytes;
	// a larger message closes the connection with message_too_big (close
	// code 4503). Must be at least 1024. Default 65536 (64 KiB).
	MaxMessageSize int

	// MaxInflight bounds the requests (subscribe, publish, refresh) one
	// WebSocket connection may have running at once; a request beyond it is
	// answered with the error too_many_requests and the connection stays
	// open. Default 16.
	MaxInflight int

	// ConnectTimeout is how long a new WebSocket connection may take to
	// send its connect frame; past it the connection is closed with the
	// reason timeout (close code 4005). Default 10s.
	ConnectTimeout time.Duration

	// ConnectAttemptsPerIP is the sustained rate, per second, of new SSE and
	// WebSocket connections one client address may open (a token bucket per
	// IPv4 address or IPv6 /64). An attempt beyond it is answered 429 with
	// Retry-After before any authentication. Negative disables the limit
	// (behind a proxy, set TrustedProxies, or every client shares the
	// proxy's address). Default 20.
	ConnectAttemptsPerIP float64

	// ConnectAttemptsBurst is how many connection attempts one address may
	// make at once before ConnectAttemptsPerIP applies. Default 40.
	ConnectAttemptsBurst int

	// TrustedProxies lists the reverse proxies (IPv4 or IPv6 prefixes; one
	// address is a /32 or /128) whose forwarding headers are believed.
	// When a request's TCP peer is in one, its client address is read from
	// the Forwarded header (RFC 7239 for=) when present, else from
	// X-Forwarded-For, from the right, skipping hops that are trusted
	// proxies themselves; from any other peer both headers are ignored.
	// The client address keys ConnectAttemptsPerIP and is logged as
	// "remote". Default none: every client is its TCP peer.
	TrustedProxies []netip.Prefix

	// MaxConnectionsPerUser bounds the concurrent connections (both
	// transports) of one subject of one tenant on this host. A connection
	// beyond it is refused with 429 too_many_connections (a WebSocket whose
	// upgrade request carries the credentials: before the upgrade; one
	// authenticated by its connect frame: an error reply, then close code
	// 4006). 0 means the default; negative means unlimited. Default 100.
	MaxConnectionsPerUser int

	// RevalidateInterval is the period of the revalidation timer: one ticker
	// for the whole server that, on every tick, takes one snapshot of the
	// revocation list (Deps.Revocations) and closes the connections whose
	// token it revokes and the subscriptions whose subscription token it
	// revokes, and re-authorizes subscriptions allowed by a webhook answer
	// that has lapsed. A revoked token, session or subscription token is
	// cut within it. Token expiry is not the tick's: every connection and
	// every subscription token has a timer of its own. Default 10s.
	RevalidateInterval time.Duration

	// RefreshAhead is how long before its token's exp a connection is asked
	// for a fresh token, by the connection's own timer: a WebSocket client
	// gets a "refresh" push, an SSE stream a "reauth" event (right after
	// connect, or as the stream opens, for a token closer to its exp than
	// this). Must exceed the SSE expiry lead (500ms), so a stream hears
	// "reauth" before it ends. Default 60s.
	RefreshAhead time.Duration

	// ExpiryGrace is how long past its token's exp a WebSocket connection
	// stays open waiting for a refresh; then it is closed with
	// token_expired (close code 4100), by the connection's own timer. SSE
	// streams are instead ended 500ms before exp, by a timer of the
	// stream's own. Default 5s.
	ExpiryGrace time.Duration

	// queuedOnly sends every publication through the connection's queue
	// and writer, never from the hub's side: a test's way to make
	// connections fall behind a tiny queue, which a socket that takes
	// every direct write would otherwise never let happen.
	queuedOnly bool
}

// Defaults of Config, exported for docs and the CLI.
const (
	DefaultListen                 = "127.0.0.1:8080"
	DefaultHeaderTimeout          = 10 * time.Second
	DefaultMaxConnections         = 10000
	DefaultMaxSubscriptions       = 128
	DefaultQueueMaxBytes          = 1 << 20
	DefaultQueueMaxMessages       = 1024
	DefaultWriteTimeout           = 10 * time.Second
	DefaultHeartbeatInterval      = 15 * time.Second
	DefaultSSERetry               = 2 * time.Second
	DefaultClientTimeout          = 60 * time.Second
	DefaultCookieName             = "herald_token"
	DefaultShutdownReconnectDelay = 5 * time.Second
	DefaultShutdownTimeout        = 10 * time.Second
	DefaultMaxMessageSize         = ws.DefaultMaxMessageSize
	DefaultMaxInflight            = 16
	DefaultConnectTimeout         = 10 * time.Second
	DefaultConnectAttemptsPerIP   = 20.0
	DefaultConnectAttemptsBurst   = 40
	DefaultMaxConnectionsPerUser  = 100
	DefaultRevalidateInterval     = 10 * time.Second
	DefaultRefreshAhead           = 60 * time.Second
	DefaultExpiryGrace            = 5 * time.Second
	DefaultVersion                = "dev"
)

// minRevalidateInterval is the shortest RevalidateInterval accepted.
const minRevalidateInterval = 10 * time.Millisecond

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	setStr := func(p *string, d string) {
		if *p == "" {
			*p = d
		}
	}
	setInt := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setDur := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	setStr(&c.Listen, DefaultListen)
	setDur(&c.HeaderTimeout, DefaultHeaderTimeout)
	setInt(&c.MaxConnections, DefaultMaxConnections)
	setInt(&c.MaxSubscriptions, DefaultMaxSubscriptions)
	setInt(&c.QueueMaxBytes, DefaultQueueMaxBytes)
	setInt(&c.QueueMaxMessages, DefaultQueueMaxMessages)
	setDur(&c.WriteTimeout, DefaultWriteTimeout)
	setDur(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	setDur(&c.SSERetry, DefaultSSERetry)
	setDur(&c.ClientTimeout, DefaultClientTimeout)
	setStr(&c.CookieName, DefaultCookieName)
	setDur(&c.ShutdownReconnectDelay, DefaultShutdownReconnectDelay)
	setDur(&c.ShutdownTimeout, DefaultShutdownTimeout)
	setInt(&c.MaxMessageSize, DefaultMaxMessageSize)
	setInt(&c.MaxInflight, DefaultMaxInflight)
	setDur(&c.ConnectTimeout, DefaultConnectTimeout)
	if c.ConnectAttemptsPerIP == 0 {
		c.ConnectAttemptsPerIP = DefaultConnectAttemptsPerIP
	}
	setInt(&c.ConnectAttemptsBurst, DefaultConnectAttemptsBurst)
	setInt(&c.MaxConnectionsPerUser, DefaultMaxConnectionsPerUser)
	setDur(&c.RevalidateInterval, DefaultRevalidateInterval)
	setDur(&c.RefreshAhead, DefaultRefreshAhead)
	setDur(&c.ExpiryGrace, DefaultExpiryGrace)
	setStr(&c.Version, DefaultVersion)
	return c
}

// bounds are the limits and timings of every connection (a Config that
// withDefaults filled), which the connection core hands its transports.
func (c Config) bounds() session.Bounds {
	return session.Bounds{
		QueueMaxBytes:     c.QueueMaxBytes,
		QueueMaxMessages:  c.QueueMaxMessages,
		HistorySize:       c.HistorySize,
		HistoryTTL:        c.HistoryTTL,
		MaxSubscriptions:  c.MaxSubscriptions,
		MaxMessageSize:    c.MaxMessageSize,
		MaxInflight:       c.MaxInflight,
		HeartbeatInterval: c.HeartbeatInterval,
		WriteTimeout:      c.WriteTimeout,
		ConnectTimeout:    c.ConnectTimeout,
		ClientTimeout:     c.ClientTimeout,
		RefreshAhead:      c.RefreshAhead,
		ExpiryGrace:       c.ExpiryGrace,
		QueuedOnly:        c.queuedOnly,
	}
}

// validate checks a Config that withDefaults already filled.
func (c Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("gateway: %w: "+format, append([]any{ErrInvalidConfig}, a...)...)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return bad("Listen %q is not host:port: %v", c.Listen, err)
	}
	positive := []struct {
		name string
		v    int
	}{
		{"MaxConnections", c.MaxConnections},
		{"MaxSubscriptions", c.MaxSubscriptions},
		{"QueueMaxBytes", c.QueueMaxBytes},
		{"QueueMaxMessages", c.QueueMaxMessages},
		{"MaxMessageSize", c.MaxMessageSize},
		{"MaxInflight", c.MaxInflight},
		{"ConnectAttemptsBurst", c.ConnectAttemptsBurst},
	}
	for _, p := range positive {
		if p.v < 0 {
			return bad("%s must be positive (0 means the default), got %d", p.name, p.v)
		}
	}
	if c.QueueMaxBytes < 1024 {
		return bad("QueueMaxBytes must be at least 1024 so one publication fits, got %d", c.QueueMaxBytes)
	}
	durations := []struct {
		name string
		v    time.Duration
	}{
		{"HeaderTimeout", c.HeaderTimeout},
		{"WriteTimeout", c.WriteTimeout},
		{"HeartbeatInterval", c.HeartbeatInterval},
		{"SSERetry", c.SSERetry},
		{"ClientTimeout", c.ClientTimeout},
		{"ShutdownReconnectDelay", c.ShutdownReconnectDelay},
		{"ShutdownTimeout", c.ShutdownTimeout},
		{"ConnectTimeout", c.ConnectTimeout},
		{"RevalidateInterval", c.RevalidateInterval},
		{"RefreshAhead", c.RefreshAhead},
		{"ExpiryGrace", c.ExpiryGrace},
		{"HistoryTTL", c.HistoryTTL},
	}
	for _, d := range durations {
		if d.v < 0 {
			return bad("%s must be positive (0 means the default), got %s", d.name, d.v)
		}
	}
	if c.ClientTimeout <= c.HeartbeatInterval {
		return bad("ClientTimeout (%s) must exceed HeartbeatInterval (%s)", c.ClientTimeout, c.HeartbeatInterval)
	}
	if c.RevalidateInterval < minRevalidateInterval {
		return bad("RevalidateInterval must be at least %s, got %s", minRevalidateInterval, c.RevalidateInterval)
	}
	if c.RefreshAhead <= sse.ExpiryLead {
		return bad("RefreshAhead (%s) must exceed %s, how long before exp an SSE stream ends, so a stream hears reauth before it ends",
			c.RefreshAhead, sse.ExpiryLead)
	}
	if c.MaxMessageSize < 1024 {
		return bad("MaxMessageSize must be at least 1024 so a connect frame fits, got %d", c.MaxMessageSize)
	}
	if math.IsNaN(c.ConnectAttemptsPerIP) || math.IsInf(c.ConnectAttemptsPerIP, 0) {
		return bad("ConnectAttemptsPerIP must be a finite number (negative disables the limit), got %v", c.ConnectAttemptsPerIP)
	}
	for i, p := range c.TrustedProxies {
		if !p.IsValid() {
			return bad("TrustedProxies[%d] is not a valid prefix, got %v", i, p)
		}
	}
	if err := validateOrigins(c.AllowedOrigins); err != nil {
		return bad("%v", err)
	}
	if c.SSERetry < time.Millisecond {
		return bad("SSERetry must be at least 1ms, got %s", c.SSERetry)
	}
	if err := CheckAdminToken(c.AdminToken); c.AdminToken != "" && err != nil {
		return bad("AdminToken %v", err)
	}
	for i := 0; i < len(c.CookieName); i++ {
		b := c.CookieName[i]
		if b <= ' ' || b >= 0x7f || b == '=' || b == ';' || b == ',' {
			return bad("CookieName %q holds byte %q, not allowed in a cookie name", c.CookieName, b)
		}
	}
	return nil
}
