package session

import (
	"context"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/ratelog"
	"github.com/prometheus/client_golang/prometheus"
)

// Hub hands live publications of a channel to a connection (the server's
// fanout hub): once Subscribe returns, every publication of key reaches
// s.Deliver.
type Hub interface {
	Subscribe(ctx context.Context, key fanout.Key, s fanout.Subscriber) error
	Unsubscribe(ctx context.Context, key fanout.Key, s fanout.Subscriber) error
}

// History answers recovery requests: the publications of key after since,
// at most limit of them (0: as many as the history holds).
type History interface {
	Recover(ctx context.Context, key fanout.Key, since fanout.Position, limit int) (fanout.Recovery, error)
}

// Bounds are the limits and timings of every connection of one server,
// whatever its transport: the server fills them once from its Config,
// where each is documented with its default, and the transports read
// them here (Conn.Bounds), so no transport keeps a copy.
type Bounds struct {
	QueueMaxBytes     int           // the send and control queues' byte bound
	QueueMaxMessages  int           // the send and control queues' message bound
	HistorySize       int           // how far back a channel's history reaches; 0: unknown
	HistoryTTL        time.Duration // how long an idle channel's history stays; 0: unknown
	MaxSubscriptions  int           // subscriptions a client may ask for (per SSE request, per WebSocket)
	MaxMessageSize    int           // the largest message a WebSocket client may send
	MaxInflight       int           // the requests a WebSocket client may have running at once
	HeartbeatInterval time.Duration // between keep-alive frames
	WriteTimeout      time.Duration // bounds the write of one batch
	ConnectTimeout    time.Duration // a WebSocket's time to send its connect frame
	ClientTimeout     time.Duration // how long a WebSocket client may stay silent
	RefreshAhead      time.Duration // how long before its token's exp a connection is asked for a fresh one
	ExpiryGrace       time.Duration // how long past its token's exp a WebSocket waits for a refresh
	QueuedOnly        bool          // never write a publication from the hub's side (tests: queues that fill)
}

// The bounds a connection is refused something or closed at
//
//	(herald_limit_rejections_total{limit}).
const (
	LimitMessageSize    = "message_size"    // MaxMessageSize
	LimitInflight       = "inflight"        // MaxInflight
	LimitSubscriptions  = "subscriptions"   // MaxSubscriptions
	LimitClientTimeout  = "client_timeout"  // ClientTimeout
	LimitConnectTimeout = "connect_timeout" // ConnectTimeout
	LimitQueue          = "queue"           // QueueMaxBytes / QueueMaxMessages: closed as slow (Counters.QueueLimit)
)

// Counters are the metrics the core updates.
type Counters struct {
	// Deliveries counts publications written, by transport
	// (herald_deliveries_total).
	Deliveries *prometheus.CounterVec
	// QueueDropped counts publications dropped from full queues.
	QueueDropped prometheus.Counter
	// CatchUps counts connections that fell behind their queue, by
	// transport.
	CatchUps *prometheus.CounterVec
	// QueueLimit counts connections closed as slow (a limit rejection).
	QueueLimit prometheus.Counter
	// SubsEnded counts subscriptions the server ended, by transport and
	// reason.
	SubsEnded *prometheus.CounterVec
	// ReauthFailures counts re-authorizations that failed.
	ReauthFailures prometheus.Counter
}

// Env is what every connection of one server shares: the bounds, the hub
// and the history it subscribes and recovers through, the counters, the
// logger and the writer pool. The server owns it; a connection holds a
// pointer.
type Env struct {
	Bounds   Bounds
	Hub      Hub
	History  History
	Counters Counters
	Log      *ratelog.Logger // rate-limited connection log
	Writers  *WriterPool
}
