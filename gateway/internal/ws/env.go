package ws

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/internal/ratelog"
	"github.com/heraldgw/herald/subscriptions"
)

// ErrBadFrame is wrapped by every client-frame decode error
// (gateway.ErrBadFrame).
var ErrBadFrame = errors.New("bad frame")

// Where a connection's token came from, as admission and its logs name it.
const (
	SourceTicket = "ticket"
	SourceFrame  = "connect frame"
)

// Limits a connection counts when it refuses something
// (herald_limit_rejections_total{limit}).
const (
	LimitMessageSize    = "message_size"    // MaxMessageSize
	LimitInflight       = "inflight"        // MaxInflight
	LimitSubscriptions  = "subscriptions"   // MaxSubscriptions
	LimitClientTimeout  = "client_timeout"  // ClientTimeout
	LimitConnectTimeout = "connect_timeout" // ConnectTimeout
)

// DefaultMaxMessageSize is the default of Config.MaxMessageSize
// (gateway.DefaultMaxMessageSize): a read buffer up to twice its size goes
// back to the pool.
const DefaultMaxMessageSize = 64 << 10

// Server is what a WebSocket connection needs of the server that
// accepted it.
type Server interface {
	// VerifyToken verifies a token that came from source.
	VerifyToken(token, source string) (*auth.Claims, session.Reason, string)
	// RedeemTicket spends a ticket for the claims it was issued for.
	RedeemTicket(ctx context.Context, ticket string) (*auth.Claims, session.Reason, string)
	// Admit decides whether verified claims may connect (revocation,
	// expiry with slack).
	Admit(c *auth.Claims, source string, slack time.Duration) (session.Reason, string)
	// AcquireUser takes one of the user's connection slots for c.
	AcquireUser(c *session.Conn, claims *auth.Claims) bool
	// UserLimitReason is the reason of a connect refused at
	// MaxConnectionsPerUser.
	UserLimitReason() session.Reason
	// Opened counts and logs a connection whose connect succeeded.
	Opened(c *session.Conn)
	// Closed counts and logs an opened connection once it ended.
	Closed(c *session.Conn)
	// Unregister, ReleaseUser and ReleaseSlot give back the connection's
	// registration, the user's slot and the server's slot.
	Unregister(c *session.Conn)
	ReleaseUser(c *session.Conn)
	ReleaseSlot()
	// Publisher is the broker that takes client publications, or nil.
	Publisher() Publisher
	// Authorize decides a subscription.
	Authorize(ctx context.Context, r subscriptions.Request) (subscriptions.Decision, error)
	// Limit counts a refusal at a bound (the Limit* labels).
	Limit(limit string)
	// Refused counts a connection closed for r before its connect
	// succeeded.
	Refused(r session.Reason)
}

// Publisher is a broker that takes client publications (fanout.Broker).
type Publisher interface {
	Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error)
}

// Config is what the WebSocket connections read of the gateway's Config.
type Config struct {
	Version           string
	CookieName        string
	MaxMessageSize    int
	MaxSubscriptions  int
	MaxInflight       int
	HistorySize       int
	HistoryTTL        time.Duration
	WriteTimeout      time.Duration
	ConnectTimeout    time.Duration
	ClientTimeout     time.Duration
	HeartbeatInterval time.Duration
	ExpiryGrace       time.Duration
	RefreshAhead      time.Duration
}

// Env is what the WebSocket connections of one server share.
type Env struct {
	Server   Server
	Config   Config
	Log      *ratelog.Logger        // rate-limited, for the connections' failures
	Requests *prometheus.CounterVec // herald_ws_requests_total{op,result}
}

// Credentials is what the upgrade request carried, if anything: the
// claims of its verified and admitted token, a ticket not yet redeemed,
// or why the credential was refused. A connect frame without a token uses
// them.
type Credentials struct {
	Claims *auth.Claims
	Ticket string // redeemed by connect
	Source string
	Reason session.Reason // non-empty Code: the credential was refused
	Msg    string
}
