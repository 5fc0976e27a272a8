package outboxfeed

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/outboxfeed/internal/rules"
)

// WorkerConfig tunes a Worker. The zero value is valid.
type WorkerConfig struct {
	// Handler is the name of the handler the Worker delivers for: its
	// label in metrics and logs, and its row in the store's handler list
	// (ValidateHandlerName). Default: "realtime" (RealtimeHandler).
	Handler string
	// Routes selects the records the handler receives; the others are
	// passed over with nothing written. Default: every record.
	Routes Routes
	// RoutedElsewhere, when set, reports whether a record these Routes
	// pass over is routed to another handler; one routed to none is
	// counted (herald_outbox_unrouted_total) and logged. Default: nil, not
	// checked.
	RoutedElsewhere func(*Record) bool
	// Schedule, when set, replaces the retry backoff (RetryBaseDelay,
	// RetryMaxDelay, MaxAttempts, MaxAge) and the outage backoff
	// (OutageBaseDelay, OutageMaxDelay) with the target's own (a webhook
	// endpoint's, docs/handlers.md). Default: nil.
	Schedule Schedule
	// DisableAfter is how long the handler's target may fail continuously
	// (every delivery an outage or a retryable failure) before the Worker
	// disables the handler; its records then wait until an operator
	// enables it. Not for the realtime handler. Default: 0, never.
	DisableAfter time.Duration
	// Owner is the lease owner this Worker writes into claimed records.
	// Default: "<hostname>-<pid>-<random hex>".
	Owner string
	// BatchSize is the most records one claim of a partition takes, at
	// most MaxBatchSize. A larger batch costs the store fewer claims and
	// the subscribers fewer, fuller writes when a backlog drains; a
	// delivery Worker starts a batch's records only within its start
	// window (see PublishTimeout), so its batch must be one its target
	// can start in that time. Default: DefaultBatchSize for a Worker of
	// NewWorker (the realtime handler), DefaultHandlerBatchSize for one
	// of NewDeliveryWorker or NewHandlerWorker.
	BatchSize int
	// RangeRecords is how many records of one range (the records that
	// became visible since a partition's last completed range) a lane
	// reads and holds at once, in memory, to publish them in staging
	// order a batch at a time (PostgreSQL: a range of more than the
	// backlog threshold, BacklogRecords, is read by one statement of its
	// own right after the claim). A larger range is read in runs of its
	// transactions, which costs PostgreSQL about one more read of it.
	// Default: 100,000 (DefaultRangeRecords).
	RangeRecords int
	// Lanes is how many loops claim, publish and complete for a Worker
	// (while one lane is in the store another publishes). A claim finds a
	// backlog when it leaves records behind or takes at least
	// BacklogRecords (a sixteenth of BatchSize when that is fewer). Below a
	// backlog the first lane alone holds up to Lanes partitions with
	// records, completing them and claiming again in one store step
	// (Store.CompleteMany; a Worker with a ClaimDelay excepted); once a
	// claim finds a backlog each lane holds one partition while it keeps
	// finding full batches (a Worker starts as if its lanes' last claims
	// had found one). Only the first lane polls; the others claim
	// on wake-ups and when another lane found records. Default: 4 (the
	// PostgreSQL store's partitions).
	Lanes int
	// Concurrency is how many channels of one batch are published in
	// parallel (records of one channel are always published one after
	// another). Default: 32.
	Concurrency int
	// PollInterval is how long an idle Worker waits for a wake-up before
	// claiming anyway (wake-ups are a latency hint; polling is the truth).
	// Default: 1s.
	PollInterval time.Duration
	// ActivePollInterval is how long a Worker that found records less than
	// IdleAfter ago waits before claiming again. It stands in for wake-ups
	// while records keep coming: the notify trigger stays disarmed then, so
	// producers' commits never queue behind a NOTIFY. With a trigger, the
	// first lane polls at CycleInterval (at least ActivePollInterval)
	// through up to two claims in a row that find nothing, and arms the
	// trigger after the third. Without one, each claim in a row that finds
	// nothing doubles the wait (up to IdleAfter/4), so a Worker between two
	// records of a light load makes a handful of claims, not one every
	// ActivePollInterval. Default: 500µs.
	ActivePollInterval time.Duration
	// IdleAfter is how long without records makes a Worker idle: it arms
	// the notify trigger (PostgreSQL) and waits for a wake-up or
	// PollInterval. A Worker whose first lane polled arms it sooner, once
	// three claims in a row found nothing. Default: 50ms.
	IdleAfter time.Duration
	// CycleInterval paces the first lane while records trickle in: after
	// a claim that found fewer records than a backlog (BacklogRecords, or
	// none), its next claim (with a completion, or an active poll) starts
	// no sooner than CycleInterval after the previous one began. Each
	// claim costs PostgreSQL about the same whether it finds one record or
	// a few, so at a steady flow fewer claims of a few records each cost it
	// less per record, at the price of up to CycleInterval of latency for a
	// record committed just after a claim. A claim that found a backlog is
	// followed at once (a backlog drains at full speed), and a stopping
	// Worker does not wait. Negative: no pacing (a lane claims again as
	// soon as its previous claim returned). At most IdleAfter.
	// Default: 2ms (DefaultCycleInterval), or IdleAfter when that is less.
	CycleInterval time.Duration
	// ClaimDelay is how long after a claim that found less than a full
	// batch (and nothing behind it) a lane waits before it completes that
	// batch and claims again, so the records committed meanwhile are
	// claimed together: a claim of a few records costs the store about as
	// much as a claim of one, so fewer, fuller claims cost it less per
	// record, at the price of up to ClaimDelay of latency. A claim that
	// found a backlog is followed at once. Webhook handlers' Workers take
	// theirs from the endpoint's claim_delay (docs/handlers.md).
	// Default: 0, at once (the realtime handler).
	ClaimDelay time.Duration
	// LeaseDuration is how long a claimed batch stays with this Worker
	// before another may take its partition over. While the batch's
	// deliveries run the Worker renews it every LeaseDuration/3
	// (Store.Renew), so a batch may take longer than its lease, and a
	// Worker that dies loses its partitions within one LeaseDuration.
	// Default: 30s.
	LeaseDuration time.Duration
	// PublishTimeout bounds one Publish (or Deliver, or Handle) call.
	// Successive publishes share a deadline renewed when less than half
	// of it is left, so a call is given between half of PublishTimeout
	// and all of it. A batch starts no record but each channel's first
	// after half of LeaseDuration, or after PublishTimeout if that is
	// longer, and its lease is renewed only while a call is within its
	// PublishTimeout: a call that overruns it lets the lease run out.
	// Default: 10s, or half of LeaseDuration if that is shorter.
	PublishTimeout time.Duration
	// MaxAttempts is how many failed attempts a record gets before it is
	// dead-lettered. Default: 10.
	MaxAttempts int
	// MaxAge is how long after occurred_at a failing record keeps being
	// retried; the first failure after it dead-letters the record.
	// Default: 24h.
	MaxAge time.Duration
	// RetryBaseDelay and RetryMaxDelay bound the retry backoff: attempt n
	// waits a uniformly random time in [0, min(max, base·2^(n-1))] (full
	// jitter). Defaults: 1s and 5m.
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// OutageBaseDelay and OutageMaxDelay bound the backoff of a batch's
	// completion while the store does not answer, and of dispatch while
	// the broker does not take publishes but its Publisher is no Pinger
	// (or answers pings): exponential, half jittered.
	// Defaults: 100ms and 30s.
	OutageBaseDelay time.Duration
	OutageMaxDelay  time.Duration
	// ProbeInterval and ProbeMaxInterval bound the pings of a store that
	// stopped answering: meanwhile the Worker claims nothing and refreshes
	// no gauge, and only pings, the first ProbeInterval after the failure,
	// then doubling the wait up to ProbeMaxInterval (each wait shortened by
	// up to a quarter at random). Dispatch and readiness return within
	// ProbeMaxInterval of the store answering again (about a dozen pings
	// in a 30 s outage with the defaults). Defaults: 250ms and 5s.
	ProbeInterval    time.Duration
	ProbeMaxInterval time.Duration
	// BrokerProbeMaxInterval bounds the pings of a broker that stopped
	// taking publishes, when the Publisher is a Pinger (the fanout brokers
	// are): the Worker then claims and writes nothing and pings the broker,
	// the first after ProbeInterval (or this, if shorter), doubling up to
	// BrokerProbeMaxInterval, so dispatch resumes within about this long
	// of the broker answering. Default: 1s.
	BrokerProbeMaxInterval time.Duration
	// StatsInterval is how often the backlog gauges are refreshed with a
	// count query. Default: 10s.
	StatsInterval time.Duration
	// DurableClaims makes the Worker's claim-and-complete transactions
	// wait for their WAL flush like any other commit. By default they
	// commit with synchronous_commit off (PostgreSQL; SQLite ignores it): a
	// server crash can then lose the last few such commits, which only
	// means records are published again (a lost claim returns them to
	// eligible work, a lost completion leaves them to be taken over, one
	// attempt burnt, when their lease expires) — never that a record is
	// marked dispatched before the broker accepted it. Producers' commits
	// are not affected.
	// Default: false.
	DurableClaims bool
	// ShutdownTimeout bounds the final writes on Stop (completing what was
	// published, releasing the rest). Default: 5s.
	ShutdownTimeout time.Duration
	// Leads, when set, is marked busy while this Worker's claims find a
	// backlog; the Workers that yield to it (YieldsTo) wait between
	// batches meanwhile. The realtime handler's Worker leads. Default:
	// nil.
	Leads *Precedence
	// YieldsTo, when set, makes this Worker wait before each claim while
	// the Worker leading it has a backlog, at most PollInterval each time
	// (docs/handlers.md, "Realtime goes first"). Webhook handlers' Workers
	// yield to the realtime one. Default: nil, never.
	YieldsTo *Precedence
	// Registry lists the readable (type, schema_version) pairs. Default:
	// nil, every type at any version ≥ 1.
	Registry *Registry
	// Logger receives Worker events; outage logs are rate-limited to one
	// per LogEvery. Default: discard.
	Logger *slog.Logger
	// LogEvery is the rate limit of repeated outage logs. Default: 30s.
	LogEvery time.Duration
	// Registerer receives the herald_outbox_* metrics. Default: nil, not
	// registered.
	Registerer prometheus.Registerer
}

func (c WorkerConfig) withDefaults() WorkerConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Owner == "" {
		c.Owner = defaultOwner()
	}
	if c.Handler == "" {
		c.Handler = RealtimeHandler
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.RangeRecords == 0 {
		c.RangeRecords = DefaultRangeRecords
	}
	if c.Lanes == 0 {
		c.Lanes = 4
	}
	if c.Concurrency == 0 {
		c.Concurrency = 32
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	def(&c.PollInterval, time.Second)
	def(&c.ActivePollInterval, 500*time.Microsecond)
	def(&c.IdleAfter, 50*time.Millisecond)
	def(&c.CycleInterval, min(DefaultCycleInterval, c.IdleAfter))
	def(&c.LeaseDuration, 30*time.Second)
	def(&c.PublishTimeout, min(10*time.Second, c.LeaseDuration/2))
	def(&c.MaxAge, 24*time.Hour)
	def(&c.RetryBaseDelay, time.Second)
	def(&c.RetryMaxDelay, 5*time.Minute)
	def(&c.OutageBaseDelay, 100*time.Millisecond)
	def(&c.OutageMaxDelay, 30*time.Second)
	def(&c.StatsInterval, 10*time.Second)
	def(&c.ProbeInterval, 250*time.Millisecond)
	def(&c.ProbeMaxInterval, max(5*time.Second, c.ProbeInterval))
	def(&c.BrokerProbeMaxInterval, time.Second)
	def(&c.ShutdownTimeout, 5*time.Second)
	def(&c.LogEvery, 30*time.Second)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c WorkerConfig) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if err := ValidateHandlerName(c.Handler); err != nil {
		return bad("Handler: %v", err)
	}
	switch {
	case c.DisableAfter < 0:
		return bad("DisableAfter %v: must not be negative", c.DisableAfter)
	case c.DisableAfter > 0 && c.Handler == RealtimeHandler:
		return bad("DisableAfter: the realtime handler is never disabled")
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return bad("BatchSize %d: must be between 1 and %d", c.BatchSize, MaxBatchSize)
	case c.RangeRecords < c.BatchSize || c.RangeRecords > maxRangeRecords:
		return bad("RangeRecords %d: must be between BatchSize (%d) and %d", c.RangeRecords, c.BatchSize, maxRangeRecords)
	case c.Lanes < 1 || c.Lanes > maxLanes:
		return bad("Lanes %d: must be between 1 and %d", c.Lanes, maxLanes)
	case c.Concurrency < 1:
		return bad("Concurrency %d: must be ≥ 1", c.Concurrency)
	case c.MaxAttempts < 1:
		return bad("MaxAttempts %d: must be ≥ 1", c.MaxAttempts)
	case c.LeaseDuration < time.Millisecond:
		return bad("LeaseDuration %v: must be ≥ 1ms", c.LeaseDuration)
	case c.PublishTimeout <= 0:
		return bad("PublishTimeout %v: must be positive", c.PublishTimeout)
	case c.ClaimDelay < 0 || c.ClaimDelay >= c.LeaseDuration/4:
		return bad("ClaimDelay %v: must be between 0 and a quarter of LeaseDuration %v", c.ClaimDelay, c.LeaseDuration)
	case c.RetryBaseDelay < 0 || c.RetryMaxDelay < c.RetryBaseDelay:
		return bad("RetryBaseDelay %v / RetryMaxDelay %v: want 0 ≤ base ≤ max", c.RetryBaseDelay, c.RetryMaxDelay)
	case c.OutageBaseDelay <= 0 || c.OutageMaxDelay < c.OutageBaseDelay:
		return bad("OutageBaseDelay %v / OutageMaxDelay %v: want 0 < base ≤ max", c.OutageBaseDelay, c.OutageMaxDelay)
	case c.ProbeInterval <= 0 || c.ProbeMaxInterval < c.ProbeInterval:
		return bad("ProbeInterval %v / ProbeMaxInterval %v: want 0 < interval ≤ max", c.ProbeInterval, c.ProbeMaxInterval)
	case c.BrokerProbeMaxInterval <= 0:
		return bad("BrokerProbeMaxInterval %v: must be positive", c.BrokerProbeMaxInterval)
	}
	for name, d := range map[string]time.Duration{
		"PollInterval": c.PollInterval, "ActivePollInterval": c.ActivePollInterval, "IdleAfter": c.IdleAfter, "MaxAge": c.MaxAge, "StatsInterval": c.StatsInterval,
		"ShutdownTimeout": c.ShutdownTimeout, "LogEvery": c.LogEvery,
	} {
		if d < 0 {
			return bad("%s %v: must not be negative", name, d)
		}
	}
	if c.CycleInterval > c.IdleAfter {
		return bad("CycleInterval %v: must be at most IdleAfter %v", c.CycleInterval, c.IdleAfter)
	}
	return nil
}

// startWindow is how long after its claim a batch starts deliveries (but
// each channel's first): half the lease, or PublishTimeout if that is
// longer — one call may then outlast the lease, which is renewed while it
// runs.
func (c WorkerConfig) startWindow() time.Duration { return max(c.LeaseDuration/2, c.PublishTimeout) }

// DefaultCycleInterval is WorkerConfig.CycleInterval's default.
const DefaultCycleInterval = 2 * time.Millisecond

// MaxBatchSize bounds WorkerConfig.BatchSize.
const MaxBatchSize = rules.MaxBatchSize

// DefaultBatchSize is the BatchSize of a Worker that publishes (the
// realtime handler's): a drained backlog goes out in claims of up to this
// many records of a partition, each spanning more of the partition's
// channels with more records each.
const DefaultBatchSize = 10000

// DefaultHandlerBatchSize is the BatchSize of a Worker that delivers
// (NewDeliveryWorker, NewHandlerWorker): a batch its target can start
// within the start window (a webhook's default endpoint, 16 requests under
// way and a start window of 61 s, starts a batch of 1,000 records when its
// answers take up to about 0.98 s each).
const DefaultHandlerBatchSize = 1000

// BacklogRecords is how many records a claim must take (or a sixteenth
// of BatchSize, if that is fewer, at least 1) to count as finding a
// backlog, at which the other lanes take the other partitions. It does not
// grow with BatchSize: it is what a claim of a steady rate's records finds
// when one lane falls behind.
const BacklogRecords = 62

// backlogRecords is the backlog threshold of c's BatchSize.
func (c WorkerConfig) backlogRecords() int { return max(1, min(BacklogRecords, c.BatchSize/16)) }

// maxRangeRecords bounds RangeRecords.
const maxRangeRecords = 10_000_000

// maxLanes bounds Lanes (each holds a pooled connection at times).
const maxLanes = 16

// defaultOwner is "<hostname>-<pid>-<8 random hex digits>".
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "herald"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
