package gateway

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/subscriptions"
)

// Verifier checks a connection token (auth.HMACVerifier and friends).
type Verifier interface {
	Verify(token string) (*auth.Claims, error)
}

// Authorizer decides one subscription (subscriptions.Authorizer).
type Authorizer interface {
	Authorize(ctx context.Context, r subscriptions.Request) (subscriptions.Decision, error)
}

// Recoverer answers resume requests from a channel's history (a
// fanout.Broker).
type Recoverer interface {
	Recover(ctx context.Context, key fanout.Key, since fanout.Position, limit int) (fanout.Recovery, error)
}

// Hub hands live publications of a channel to this node's subscribers
// (fanout.Hub). Once Subscribe returns, every publication of key that the
// hub handles reaches s.Deliver, which never blocks; one subscriber may be
// subscribed to many keys.
type Hub interface {
	Subscribe(ctx context.Context, key fanout.Key, s fanout.Subscriber) error
	Unsubscribe(ctx context.Context, key fanout.Key, s fanout.Subscriber) error
}

// RevocationSource gives the revalidation timer the live revocation list
// (every auth.RevocationStore satisfies it).
type RevocationSource interface {
	// Snapshot returns every live revocation in one call.
	Snapshot(ctx context.Context) (*auth.RevocationSet, error)
}

// ReadyCheck is one readiness probe for /readyz.
type ReadyCheck struct {
	// Name identifies the check in the /readyz answer, e.g. "outbox".
	Name string
	// Check returns nil while the dependency answers.
	Check func(ctx context.Context) error
}

// Deps are the gateway's collaborators.
type Deps struct {
	// Verifier verifies connection tokens. Required.
	Verifier Verifier
	// Authorizer decides every subscription. Required.
	Authorizer Authorizer
	// Broker answers resume requests. Required.
	Broker Recoverer
	// Hub delivers live publications. Required.
	Hub Hub
	// ReadyChecks must all pass for /readyz to answer 200. Default none.
	ReadyChecks []ReadyCheck
	// Logger receives the gateway's logs; per-connection events are rate
	// limited. Default: discard.
	Logger *slog.Logger
	// Registerer receives the gateway's metrics. Default nil: not registered.
	Registerer prometheus.Registerer
	// Gatherer is exposed at /metrics. Default: Registerer when it is also a
	// Gatherer (a *prometheus.Registry); otherwise /metrics answers 404.
	Gatherer prometheus.Gatherer
	// ClientJS is the file system holding the browser client; its .js
	// files are served under /client/ (herald.js at /client/herald.js).
	// Default nil: 404.
	ClientJS fs.FS
	// Revocations is the revocation list: every RevalidateInterval the
	// gateway takes one snapshot of it and closes the connections whose
	// token (jti) or session (sid) it names; new connections and refreshes
	// are checked against the last good snapshot. While it fails, the last
	// good snapshot stays in force (fail open; see docs/security.md).
	// Default nil: tokens are never revoked.
	Revocations RevocationSource
	// Tickets issues the single-use tickets of POST /v1/tickets and redeems
	// the ticket query parameter of /v1/sse and /v1/ws (auth.MemoryTickets
	// on one node, auth.RedisTickets across nodes). Default nil: tickets are
	// off (POST /v1/tickets answers 404, a ticket parameter 401).
	Tickets auth.TicketIssuer
	// Ops gives the operator view (/ops/, Config.AdminToken) its outbox
	// numbers. Default nil: the view says this node has no outbox store.
	Ops OpsSource
}

func (d Deps) validate() error {
	missing := func(name string) error {
		return fmt.Errorf("gateway: %w: Deps.%s is required", ErrInvalidConfig, name)
	}
	switch {
	case d.Verifier == nil:
		return missing("Verifier")
	case d.Authorizer == nil:
		return missing("Authorizer")
	case d.Broker == nil:
		return missing("Broker")
	case d.Hub == nil:
		return missing("Hub")
	}
	seen := map[string]bool{}
	for i, c := range d.ReadyChecks {
		if c.Name == "" || c.Check == nil {
			return fmt.Errorf("gateway: %w: Deps.ReadyChecks[%d] needs a Name and a Check", ErrInvalidConfig, i)
		}
		if seen[c.Name] {
			return fmt.Errorf("gateway: %w: Deps.ReadyChecks: duplicate name %q", ErrInvalidConfig, c.Name)
		}
		seen[c.Name] = true
	}
	return nil
}
