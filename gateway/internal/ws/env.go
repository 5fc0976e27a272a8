package ws

import (
	"context"
	"errors"

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

// DefaultMaxMessageSize is the default of Config.MaxMessageSize
// (gateway.DefaultMaxMessageSize): a read buffer up to twice its size goes
// back to the pool.
const DefaultMaxMessageSize = 64 << 10

// Env is what the WebSocket connections of one server share: values, and
// functions of the server's core that a connection calls; nothing that
// points back into the server. The bounds are the connection core's
// (session.Conn.Bounds).
type Env struct {
	// Version is the server's release, announced in the connect reply.
	Version string
	// Publish takes a client publication (the broker); nil: publishing is
	// not available on this server.
	Publish func(ctx context.Context, msg fanout.Message) (fanout.Publication, error)
	// Authorize decides a subscription.
	Authorize func(ctx context.Context, r subscriptions.Request) (subscriptions.Decision, error)
	// Refresh verifies a refresh request's token and admits its claims
	// (revocation, expiry with ExpiryGrace), or says why not.
	Refresh  func(token string) (*auth.Claims, session.Reason, string)
	Log      *ratelog.Logger        // rate-limited, for the connections' failures
	Requests *prometheus.CounterVec // herald_ws_requests_total{op,result}
	Limits   *prometheus.CounterVec // herald_limit_rejections_total{limit}: session.Limit*
}

// Connect admits one connection at its connect request: token is the
// connect frame's ("" when it carries none, and the credential of the
// upgrade request applies). It returns the claims of a connection
// admitted, that is authenticated (session.Conn.Claims set), holding its
// user's slot and counted open, or the reason and message it is refused
// with. ctx ends at ConnectTimeout or when the connection closes.
type Connect func(ctx context.Context, token string) (*auth.Claims, session.Reason, string)
