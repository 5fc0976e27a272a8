package main

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/cfoutbox"
)

// Bounds every run stays within: the generator only ever loads a server on
// this machine, for a bounded time, with a bounded number of connections.
const (
	maxConns    = 19_500 // per side; the machine allows 20,000 open files per process
	maxDuration = 10 * time.Minute
	maxRate     = 100_000
	maxServeFor = time.Hour
	// maxProducers bounds the outbox publisher's connections (PostgreSQL's
	// default max_connections is 100, and the server needs its own).
	maxProducers = 64
)

// config is one run. Every field is a flag.
type config struct {
	// Scenario is idle, broadcast or fanout. Default: broadcast.
	Scenario string
	// Server is the server under load: herald, or centrifugo (a child
	// Centrifugo, CentrifugoBin, for comparison: WebSocket subscribers
	// with its JSON protocol, publications through its server API).
	// Default: herald.
	Server string
	// CentrifugoBin is the Centrifugo binary for Server centrifugo.
	// Default: /tmp/cfbin/centrifugo.
	CentrifugoBin string
	// CFBatch, CFPartitions, CFPollInterval and CFNotify shape
	// Centrifugo's PostgreSQL outbox consumer with PublishVia outbox:
	// partition_select_limit, num_partitions, partition_poll_interval,
	// and the per-row pg_notify trigger with partition_notification_channel.
	// Default: cfbench's best, 1,000 × 4, 300ms, notifications on.
	CFBatch        int
	CFPartitions   int
	CFPollInterval time.Duration
	CFNotify       bool
	// Transport of the subscribers: ws or sse. Default: ws.
	Transport string
	// PublishVia is how publications reach the server: ws (the herald.v1
	// publish op on one WebSocket; Centrifugo's server API) or outbox
	// (each staged in its own transaction on DatabaseURL, which the
	// server's consumer drains: outboxfeed.Stage into herald.outbox for
	// Herald, a publish command into a fresh table of Centrifugo's
	// documented outbox shape for Centrifugo). Default: ws.
	PublishVia string
	// Producers is the outbox publisher's PostgreSQL connections, each
	// running one transaction at a time. Default: 8.
	Producers int
	// Burst, with PublishVia outbox, replaces the paced publisher: this
	// many publications, round-robin over the channels, staged in one
	// transaction per producer and committed all at once; the report
	// gives the drain from the first COMMIT to the last delivery. Rate
	// and Duration are then unused. Default: 0 (paced).
	Burst int
	// Conns is how many subscriber connections to open. Default: 1,000.
	Conns int
	// Channels is how many channels the subscribers spread over
	// (round-robin). broadcast always uses 1. Default: 100.
	Channels int
	// Rate is publications per second, over all channels. Default: 100.
	Rate int
	// Duration is how long to publish (broadcast, fanout) or to hold the
	// connections open (idle). Default: 10s.
	Duration time.Duration
	// Drain is how long to wait, after the last publication, for the
	// deliveries still on their way. Default: 5s.
	Drain time.Duration
	// ConnectTimeout bounds opening (and subscribing) every connection.
	// Default: 2m.
	ConnectTimeout time.Duration
	// DialConcurrency is how many connections are being opened at once.
	// Default: 64.
	DialConcurrency int
	// Stall is how many subscribers stop reading once subscribed and read
	// again only when publishing ends: slow consumers, which the server
	// should close as slow (after its send queue, --queue-max-messages /
	// --queue-max-bytes, fills) without disturbing the others. They are
	// left out of the latency figures. Default: 0.
	Stall int
	// PayloadBytes pads each publication's data with this many bytes.
	// Default: 0 (the payload is about 40 bytes).
	PayloadBytes int

	// URL targets a running server (http://127.0.0.1:8080); empty starts a
	// child `herald serve`. Default: empty.
	URL string
	// Secret is the server's HS256 secret, needed with URL. With a child,
	// a random one is generated.
	Secret string
	// ServerPID is the running server's process id (with URL), so its RSS
	// and CPU can be read from /proc; 0 falls back to /metrics.
	ServerPID int
	// Tenant of every token. Default: bench.
	Tenant string

	// HeraldBin is a prebuilt herald binary; empty builds ./cmd/herald.
	HeraldBin string
	// DatabaseURL starts the child with --database-url (PostgreSQL)
	// instead of the embedded SQLite store. With PublishVia outbox it is
	// required: a child gets a fresh database created on that server (and
	// dropped at the end); a -url server must use exactly this database.
	DatabaseURL string
	// ServeArgs are extra flags for the child's `herald serve`.
	ServeArgs []string
	// Stages, with a child herald and PublishVia outbox, splits commit →
	// client into the Worker's, the broker's and the client's stages
	// (stages.go); the child is built with -tags heraldstages, or
	// HeraldBin must be. Default: off.
	Stages bool

	// ServeOnly starts the child, prints its URL, secret and a token, and
	// waits (for SIGINT, or ServeFor).
	ServeOnly bool
	// ServeFor bounds ServeOnly. Default: 10m.
	ServeFor time.Duration

	// PollInterval is how often each client of the poll scenario asks
	// for updates. Default: 1s.
	PollInterval time.Duration
}

func defaultConfig() config {
	return config{
		Scenario: "broadcast", Server: "herald", CentrifugoBin: "/tmp/cfbin/centrifugo",
		CFBatch: cfoutbox.BestBatch, CFPartitions: cfoutbox.BestPartitions, CFPollInterval: cfoutbox.DefaultPoll, CFNotify: true,
		Transport: "ws", PublishVia: "ws", Producers: 8, Conns: 1_000, Channels: 100, Rate: 100,
		Duration: 10 * time.Second, Drain: 5 * time.Second, ConnectTimeout: 2 * time.Minute,
		DialConcurrency: 64, Tenant: "bench", ServeFor: 10 * time.Minute, PollInterval: time.Second,
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.Scenario, "scenario", c.Scenario, "idle, broadcast, fanout, or poll (the same update stream by polling and by SSE push, side by side; needs -database-url)")
	fs.DurationVar(&c.PollInterval, "poll-interval", c.PollInterval, "with -scenario poll: how often each polling client asks for updates")
	fs.StringVar(&c.Server, "server", c.Server, "server under load: herald, or centrifugo (a child Centrifugo from -centrifugo-bin; WebSocket subscribers, publications through its server API)")
	fs.StringVar(&c.CentrifugoBin, "centrifugo-bin", c.CentrifugoBin, "with -server centrifugo: its binary (go install github.com/centrifugal/centrifugo/v6@v6.9.1)")
	fs.IntVar(&c.CFBatch, "centrifugo-batch", c.CFBatch, "with -server centrifugo -publish-via outbox: its consumer's partition_select_limit")
	fs.IntVar(&c.CFPartitions, "centrifugo-partitions", c.CFPartitions, fmt.Sprintf("with -server centrifugo -publish-via outbox: its consumer's num_partitions (1–%d)", cfoutbox.MaxPartitions))
	fs.DurationVar(&c.CFPollInterval, "centrifugo-poll-interval", c.CFPollInterval, "with -server centrifugo -publish-via outbox: its consumer's partition_poll_interval")
	fs.BoolVar(&c.CFNotify, "centrifugo-notify", c.CFNotify, "with -server centrifugo -publish-via outbox: install its documented per-row pg_notify trigger and LISTEN (partition_notification_channel)")
	fs.StringVar(&c.Transport, "transport", c.Transport, "subscriber transport: ws or sse")
	fs.StringVar(&c.PublishVia, "publish-via", c.PublishVia, "ws: the WebSocket publish op (Centrifugo: its server API); outbox: stage each publication in its own transaction (needs -database-url) in herald.outbox (Centrifugo: a fresh table its PostgreSQL consumer drains) and report commit → client latency")
	fs.IntVar(&c.Burst, "burst", c.Burst, "with -publish-via outbox: instead of pacing, stage this many publications in one transaction per producer, commit them all at once and report the drain from the first COMMIT to the last delivery")
	fs.IntVar(&c.Producers, "producers", c.Producers, fmt.Sprintf("with -publish-via outbox: producer connections (1–%d)", maxProducers))
	fs.IntVar(&c.Conns, "conns", c.Conns, fmt.Sprintf("subscriber connections (1–%d)", maxConns))
	fs.IntVar(&c.Channels, "channels", c.Channels, "channels the subscribers spread over (broadcast: always 1)")
	fs.IntVar(&c.Rate, "rate", c.Rate, "publications per second over all channels")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long to publish (broadcast, fanout) or hold the connections (idle)")
	fs.DurationVar(&c.Drain, "drain", c.Drain, "how long to wait for deliveries after the last publication")
	fs.DurationVar(&c.ConnectTimeout, "connect-timeout", c.ConnectTimeout, "bound on opening and subscribing every connection")
	fs.IntVar(&c.DialConcurrency, "dial-concurrency", c.DialConcurrency, "connections opened at once")
	fs.IntVar(&c.Stall, "stall", c.Stall, "subscribers that stop reading until publishing ends (slow consumers; left out of latency)")
	fs.IntVar(&c.PayloadBytes, "payload-bytes", c.PayloadBytes, "extra bytes of padding in each publication's data")
	fs.StringVar(&c.URL, "url", c.URL, "target a running server (loopback only) instead of starting a child herald serve")
	fs.StringVar(&c.Secret, "jwt-secret", c.Secret, "the server's HS256 secret (--jwt-hmac-secret); required with -url")
	fs.IntVar(&c.ServerPID, "server-pid", c.ServerPID, "with -url: the server's pid, to read its RSS and CPU from /proc (else from /metrics)")
	fs.StringVar(&c.Tenant, "tenant", c.Tenant, "tenant of every token")
	fs.StringVar(&c.HeraldBin, "herald-bin", c.HeraldBin, "prebuilt herald binary for the child (empty: go build ./cmd/herald)")
	fs.StringVar(&c.DatabaseURL, "database-url", c.DatabaseURL, "start the child with --database-url (PostgreSQL outbox store) instead of embedded SQLite; with -publish-via outbox: required (a child gets a fresh database on that server; a -url server must use this one)")
	fs.BoolVar(&c.Stages, "stages", c.Stages, "with a child herald and -publish-via outbox: split COMMIT → client into the Worker's, the broker's and the client's stages (builds the child with -tags heraldstages; a -herald-bin must be built so)")
	fs.Var((*stringList)(&c.ServeArgs), "serve-arg", "extra flag for the child herald serve, e.g. -serve-arg=--queue-max-messages=64 (repeatable)")
	fs.BoolVar(&c.ServeOnly, "serve-only", c.ServeOnly, "start the child, print its URL, secret and a token, and wait (for k6)")
	fs.DurationVar(&c.ServeFor, "serve-for", c.ServeFor, "with -serve-only: stop the child after this long")
}

// channels is how many channels the scenario spreads over.
func (c *config) channels() int {
	if c.Scenario == "broadcast" {
		return 1
	}
	return min(c.Channels, c.Conns)
}

// centrifugo reports whether the server under load is Centrifugo.
func (c *config) centrifugo() bool { return c.Server == "centrifugo" }

// publishes reports whether the scenario publishes.
func (c *config) publishes() bool { return c.Scenario != "idle" }

// publications is how many publications a publishing run makes.
func (c *config) publications() int {
	if c.Burst > 0 {
		return c.Burst
	}
	return int(float64(c.Rate) * c.Duration.Seconds())
}

func (c *config) validate() error {
	var bad benchkit.FlagErrors
	switch c.Scenario {
	case "idle", "broadcast", "fanout":
	case "poll":
		c.validatePoll(&bad)
	default:
		bad.Badf("-scenario %q: want idle, broadcast, fanout or poll", c.Scenario)
	}
	switch c.Transport {
	case "ws", "sse":
	default:
		bad.Badf("-transport %q: want ws or sse", c.Transport)
	}
	if c.Stages && (c.centrifugo() || c.URL != "" || c.PublishVia != "outbox") {
		bad.Badf("-stages: only with a child herald (no -server centrifugo, no -url) and -publish-via outbox")
	}
	c.validatePublishVia(&bad)
	c.validateServer(&bad)
	bad.Within("-conns", c.Conns, 1, maxConns)
	bad.AtLeast("-channels", c.Channels, 1)
	bad.Within("-rate", c.Rate, 1, maxRate)
	if c.Duration <= 0 || c.Duration > maxDuration {
		bad.Badf("-duration %v: must be > 0 and ≤ %v", c.Duration, maxDuration)
	}
	if c.Drain < 0 || c.Drain > time.Minute {
		bad.Badf("-drain %v: must be 0–1m", c.Drain)
	}
	if c.ConnectTimeout <= 0 || c.ConnectTimeout > maxDuration {
		bad.Badf("-connect-timeout %v: must be > 0 and ≤ %v", c.ConnectTimeout, maxDuration)
	}
	bad.Within("-dial-concurrency", c.DialConcurrency, 1, 1024)
	if c.Stall < 0 || c.Stall >= c.Conns {
		bad.Badf("-stall %d: must be 0 to -conns - 1", c.Stall)
	}
	if c.Stall > 0 && !c.publishes() {
		bad.Badf("-stall: only broadcast and fanout publish")
	}
	if c.PayloadBytes < 0 || c.PayloadBytes > 60_000 {
		bad.Badf("-payload-bytes %d: must be 0–60000 (a client frame is at most 64 KiB)", c.PayloadBytes)
	}
	if c.Tenant == "" {
		bad.Badf("-tenant: must not be empty")
	}
	if c.URL != "" {
		if err := loopbackURL(c.URL); err != nil {
			bad.Badf("-url: %v", err)
		}
		if c.Secret == "" {
			bad.Badf("-url needs -jwt-secret (the server's --jwt-hmac-secret)")
		}
		if c.ServeOnly {
			bad.Badf("-serve-only starts its own child; it takes no -url")
		}
		if len(c.ServeArgs) > 0 || c.HeraldBin != "" {
			bad.Badf("-serve-arg and -herald-bin configure the child; with -url there is none")
		}
		if c.DatabaseURL != "" && c.PublishVia != "outbox" {
			bad.Badf("-database-url configures the child; with -url it is only for -publish-via outbox (the database the server drains)")
		}
	}
	if c.ServeFor <= 0 || c.ServeFor > maxServeFor {
		bad.Badf("-serve-for %v: must be > 0 and ≤ %v", c.ServeFor, maxServeFor)
	}
	return bad.Err()
}

// validatePoll checks the poll scenario's flags. Its push side is always
// SSE through Herald's outbox, from one producer (poll.go).
func (c *config) validatePoll(bad *benchkit.FlagErrors) {
	c.Transport, c.PublishVia, c.Producers = "sse", "outbox", 1
	if c.PollInterval < 10*time.Millisecond || c.PollInterval > time.Minute {
		bad.Badf("-poll-interval %v: must be 10ms–1m", c.PollInterval)
	}
	if c.Server != "herald" || c.URL != "" || c.ServeOnly || c.Stall > 0 {
		bad.Badf("-scenario poll starts its own children: no -server centrifugo, -url, -serve-only or -stall")
	}
}

// validateServer checks -server and what Centrifugo supports here.
func (c *config) validateServer(bad *benchkit.FlagErrors) {
	switch c.Server {
	case "herald":
		return
	case "centrifugo":
	default:
		bad.Badf("-server %q: want herald or centrifugo", c.Server)
		return
	}
	if c.Transport != "ws" {
		bad.Badf("-server centrifugo: only -transport ws")
	}
	if c.URL != "" || c.ServeOnly || c.HeraldBin != "" || len(c.ServeArgs) > 0 {
		bad.Badf("-server centrifugo starts its own child: no -url, -serve-only, -herald-bin or -serve-arg")
	}
	if c.DatabaseURL != "" && c.PublishVia != "outbox" {
		bad.Badf("-server centrifugo: -database-url is for -publish-via outbox only (the database its outbox consumer drains)")
	}
	if c.CentrifugoBin == "" {
		bad.Badf("-server centrifugo needs -centrifugo-bin")
	}
	if c.PublishVia == "outbox" {
		bad.Within("-centrifugo-batch", c.CFBatch, 1, 100_000)
		bad.Within("-centrifugo-partitions", c.CFPartitions, 1, cfoutbox.MaxPartitions)
		if c.CFPollInterval < time.Millisecond || c.CFPollInterval > time.Minute {
			bad.Badf("-centrifugo-poll-interval %v: must be 1ms–1m", c.CFPollInterval)
		}
	}
}

// validatePublishVia checks -publish-via and what it needs.
func (c *config) validatePublishVia(bad *benchkit.FlagErrors) {
	bad.Within("-producers", c.Producers, 1, maxProducers)
	switch c.PublishVia {
	case "ws":
		if c.Burst != 0 {
			bad.Badf("-burst: only with -publish-via outbox")
		}
		return
	case "outbox":
	default:
		bad.Badf("-publish-via %q: want ws or outbox", c.PublishVia)
		return
	}
	if c.DatabaseURL == "" {
		bad.Badf("-publish-via outbox needs -database-url (postgres://…): the PostgreSQL server the producers stage in and the server's outbox consumer drains")
	} else if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		bad.Badf("-database-url: -publish-via outbox needs a postgres:// URL (the embedded SQLite store has no producers' side)")
	}
	if !c.publishes() {
		bad.Badf("-publish-via outbox: -scenario idle publishes nothing")
	}
	bad.AtLeast("-burst", c.Burst, 0)
	if c.ServeOnly {
		bad.Badf("-publish-via outbox: -serve-only publishes nothing")
	}
	if n := c.publications(); n > maxTracked {
		bad.Badf("-publish-via outbox: -rate × -duration = %d publications; at most %d", n, maxTracked)
	}
}

// loopbackURL accepts only http URLs whose host is a loopback address: the
// generator never sends load anywhere but this machine.
func loopbackURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" {
		return fmt.Errorf("%q: want an http:// URL", raw)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q: the host must be a loopback address (127.0.0.0/8, ::1, localhost)", raw)
	}
	return nil
}
