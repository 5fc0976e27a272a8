package gateway

import (
	"fmt"
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
	}
	for _, d := range durations {
		if d.v < 0 {
			return bad("%s must be positive (0 means the default), got %s", d.name, d.v)
		}
	}
	if c.ClientTimeout <= c.HeartbeatInterval {
		return bad("ClientTimeout (%s) must exceed HeartbeatInterval (%s)", c.ClientTimeout, c.HeartbeatInterval)
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
