package gateway

import (
	"fmt"
	"math"
	"net"
	"time"
)

// Config holds the gateway's settings. The zero value of every field means
// its documented default; withDefaults fills them and validate checks them.
type Config struct {
	// Listen is the TCP address Start listens on. Default "127.0.0.1:8080".
	Listen string

	// MaxConnections bounds concurrent realtime connections (all transports)
	// on this host; a stream beyond it is refused with 503
	// too_many_connections. Default 10000.
	MaxConnections int

	// MaxSubscriptions bounds the channels one connection may subscribe to;
	// for SSE, the channels named by one request. Default 128.
	MaxSubscriptions int

	// QueueMaxBytes bounds the bytes of publications waiting to be written to
	// one connection, including the batch being written. A connection beyond
	// it is closed with the reason "slow". Default 1 MiB.
	QueueMaxBytes int

	// QueueMaxMessages bounds the number of publications waiting to be
	// written to one connection, including the batch being written. A
	// connection beyond it is closed with the reason "slow". Default 1024.
	QueueMaxMessages int

	// WriteTimeout is the deadline for writing and flushing one batch to a
	// connection; a connection that misses it is closed with the reason
	// "write_timeout". Default 10s.
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
	// WebSocket hijacking). Each entry is a host pattern ("app.example.com",
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
	// (behind a proxy every client shares the proxy's address; limit there).
	// Default 20.
	ConnectAttemptsPerIP float64

	// ConnectAttemptsBurst is how many connection attempts one address may
	// make at once before ConnectAttemptsPerIP applies. Default 40.
	ConnectAttemptsBurst int
}

// Defaults of Config, exported for docs and the CLI.
const (
	DefaultListen                 = "127.0.0.1:8080"
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
	DefaultMaxMessageSize         = 64 << 10
	DefaultMaxInflight            = 16
	DefaultConnectTimeout         = 10 * time.Second
	DefaultConnectAttemptsPerIP   = 20.0
	DefaultConnectAttemptsBurst   = 40
)

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
	return c
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
		{"WriteTimeout", c.WriteTimeout},
		{"HeartbeatInterval", c.HeartbeatInterval},
		{"SSERetry", c.SSERetry},
		{"ClientTimeout", c.ClientTimeout},
		{"ShutdownReconnectDelay", c.ShutdownReconnectDelay},
		{"ShutdownTimeout", c.ShutdownTimeout},
		{"ConnectTimeout", c.ConnectTimeout},
	}
	for _, d := range durations {
		if d.v < 0 {
			return bad("%s must be positive (0 means the default), got %s", d.name, d.v)
		}
	}
	if c.ClientTimeout <= c.HeartbeatInterval {
		return bad("ClientTimeout (%s) must exceed HeartbeatInterval (%s)", c.ClientTimeout, c.HeartbeatInterval)
	}
	if c.MaxMessageSize < 1024 {
		return bad("MaxMessageSize must be at least 1024 so a connect frame fits, got %d", c.MaxMessageSize)
	}
	if math.IsNaN(c.ConnectAttemptsPerIP) || math.IsInf(c.ConnectAttemptsPerIP, 0) {
		return bad("ConnectAttemptsPerIP must be a finite number (negative disables the limit), got %v", c.ConnectAttemptsPerIP)
	}
	if err := validateOrigins(c.AllowedOrigins); err != nil {
		return bad("%v", err)
	}
	if c.SSERetry < time.Millisecond {
		return bad("SSERetry must be at least 1ms, got %s", c.SSERetry)
	}
	for i := 0; i < len(c.CookieName); i++ {
		b := c.CookieName[i]
		if b <= ' ' || b >= 0x7f || b == '=' || b == ';' || b == ',' {
			return bad("CookieName %q holds byte %q, not allowed in a cookie name", c.CookieName, b)
		}
	}
	return nil
}
