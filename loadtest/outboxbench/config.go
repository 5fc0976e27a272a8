package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// config is what one benchmark run does. Every field is a flag.
type config struct {
	// DatabaseURL names the server and a database to connect to while the
	// benchmark creates (and later drops) its own. Default:
	// benchkit.DefaultDatabaseURL.
	DatabaseURL string
	// Phases lists what to run, comma-separated: drain, staged, latency,
	// producers. Default: all four.
	Phases string

	// Broker is what the Worker publishes to in the drain, staged and
	// latency phases: "memory" (a fanout.MemoryBroker, the outbox's own
	// cost), "memory-log" (a MemoryBroker keeping its history log in a
	// temporary directory, as herald serve does) or "redis" (a redisbroker.Broker on RedisURL, under a key
	// prefix of its own, deleted afterwards). The producer phase always
	// uses memory. Default: memory.
	Broker string
	// RedisURL is the Redis server of -broker redis. Default:
	// redis://127.0.0.1:6379/0.
	RedisURL string
	// HoldXmin, in the drain and staged phases, keeps a transaction that
	// holds an xid open on a connection of its own from before the
	// records are staged until the phase ends (then rolls it back), so
	// the xmin horizon stays behind every record. Default: false.
	HoldXmin bool

	// Webhook runs the drain and latency phases four times each, alone,
	// beside, beside, alone (ABBA): beside, a webhook handler is
	// registered and drains the same records beside the realtime Worker,
	// delivering to a receiver process of its own that answers 204.
	// Default: false.
	Webhook bool
	// WebhookYield makes the webhook handler's Worker yield to the
	// realtime one while it has a backlog, as `herald feed` runs them
	// (outboxfeed.Precedence). Default: true.
	WebhookYield bool
	// WebhookMaxInFlight is the webhook handler's max_in_flight (0: its
	// default, 16).
	WebhookMaxInFlight int
	// WebhookPool is where the webhook handler's Worker takes its
	// PostgreSQL connections: "shared", the realtime Worker's pool, as
	// herald feed runs them, "own", a pool of its own, or "own-poll", a
	// pool of its own and no LISTEN connection (the Worker polls)
	// (diagnosis). Default: shared.
	WebhookPool string
	// WebhookClaimDelay is the webhook handler's claim_delay (0: its
	// default) (diagnosis).
	WebhookClaimDelay time.Duration
	// WebhookStatsInterval is the webhook handler's Worker's
	// StatsInterval, how often it reads its backlog statistics (0: the
	// Worker's default) (diagnosis).
	WebhookStatsInterval time.Duration
	// WebhookNull makes the webhook handler's deliveries succeed at once
	// without a request (diagnosis: its Worker's store calls alone).
	WebhookNull bool

	// Records is how many records the drain phase stages before starting
	// the Worker, and the staged phase's producers insert while it runs.
	// Default: 200,000.
	Records int
	// Channels is how many channels the records spread over. Default: 1,000.
	Channels int
	// BatchSize is the Worker's claim batch in every phase. Default: 1,000.
	BatchSize int
	// Concurrency is the Worker's per-batch channel parallelism. Default: 32
	// (the Worker's default).
	Concurrency int
	// Lanes is how many batches the Worker keeps in flight. Default: 0,
	// the Worker's own default (4).
	Lanes int
	// Partitions, if set, changes the outbox's partition count to this
	// right after the migration (herald outbox partitions --set).
	// Default: 0, the schema's own (4).
	Partitions int

	// StagedProducers is how many producers insert concurrently in the
	// staged phase. Default: 4.
	StagedProducers int
	// StagedBatch is how many rows one staged-phase transaction inserts
	// (COPY). Default: 1,000.
	StagedBatch int

	// Retained is how many already-dispatched rows the latency and
	// producer phases start with, as a retention window keeps them (the
	// planner then sees a table of production shape). 0 starts from an
	// empty table. Default: 100,000.
	Retained int

	// Rate is the paced staging rate of the latency phase, records/s.
	// Default: 1,000.
	Rate int
	// LatencyDuration is how long the latency phase stages. Default: 20s.
	LatencyDuration time.Duration
	// LatencyProducers is how many connections share the paced staging.
	// Default: 16.
	LatencyProducers int
	// SampleWaits, when positive, samples pg_stat_activity at this
	// interval during each latency run and prints what the active
	// backends were doing (diagnosis). Default: 0 (off).
	SampleWaits time.Duration
	// LatencyNotify keeps the NOTIFY wake-up trigger installed during the
	// latency phase; false drops it, so the Worker finds records by
	// polling every PollInterval. Default: true.
	LatencyNotify bool
	// PollInterval is the Worker's PollInterval in every phase. Default: 1s
	// (the Worker's default).
	PollInterval time.Duration
	// ActivePollInterval is the Worker's ActivePollInterval. Default: 0,
	// the Worker's default.
	ActivePollInterval time.Duration
	// CycleInterval is the Worker's CycleInterval (negative: no pacing).
	// Default: 0, the Worker's default.
	CycleInterval time.Duration

	// Producers is how many concurrent single-row producers the producer
	// phase runs. Default: 16.
	Producers int
	// ProducerDuration is how long each producer variant runs. Default: 10s.
	ProducerDuration time.Duration
	// ProducerVariants are the producer phase's variants in run order,
	// comma-separated <consumer>/<trigger>: consumer "worker" (a Worker
	// drains, memory broker) or "none" (no consumer at all), trigger "on"
	// or "off" (the NOTIFY wake-up trigger installed or dropped). Default:
	// worker/on,none/off,none/off,worker/on — the Worker as deployed
	// against the no-consumer baseline, ABBA. The trigger's own cost:
	// worker/on,worker/off,worker/off,worker/on.
	ProducerVariants string
	// Business makes each producer transaction of the producer phase a
	// business transaction: one business row (bench_orders), then the
	// staged record. Default: false.
	Business bool

	variants []producerVariant // parsed ProducerVariants
}

// producerVariant is one run of the producer phase.
type producerVariant struct {
	Worker  bool // a Worker drains while the producers commit
	Trigger bool // the NOTIFY wake-up trigger is installed
}

func (v producerVariant) String() string {
	c := "none"
	if v.Worker {
		c = "worker"
	}
	return c + "/" + benchkit.OnOff(v.Trigger)
}

// parseProducerVariants parses -producer-variants.
func parseProducerVariants(s string) ([]producerVariant, error) {
	var out []producerVariant
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		c, t, ok := strings.Cut(item, "/")
		if !ok || (c != "worker" && c != "none") || (t != "on" && t != "off") {
			return nil, fmt.Errorf("-producer-variants: %q: want <worker|none>/<on|off>, e.g. worker/on", item)
		}
		out = append(out, producerVariant{Worker: c == "worker", Trigger: t == "on"})
	}
	return out, nil
}

func defaultConfig() config {
	return config{
		DatabaseURL: benchkit.DefaultDatabaseURL, Phases: strings.Join(allPhases, ","),
		Broker: "memory", RedisURL: "redis://127.0.0.1:6379/0",
		Records: 200_000, Channels: 1_000, BatchSize: 1_000, Concurrency: 32, Retained: 100_000,
		StagedProducers: 4, StagedBatch: 1_000,
		Rate: 1_000, LatencyDuration: 20 * time.Second, LatencyProducers: 16, LatencyNotify: true,
		PollInterval: time.Second, WebhookYield: true, WebhookPool: "shared",
		Producers: 16, ProducerDuration: 10 * time.Second,
		ProducerVariants: "worker/on,none/off,none/off,worker/on",
	}
}

func (c *config) register(fs *flag.FlagSet) {
	benchkit.DatabaseURLFlag(fs, &c.DatabaseURL)
	benchkit.PhasesFlag(fs, &c.Phases, allPhases...)
	fs.StringVar(&c.Broker, "broker", c.Broker, "drain, staged, latency: broker the Worker publishes to: memory, memory-log (with its history log, as herald serve) or redis")
	fs.StringVar(&c.RedisURL, "redis-url", c.RedisURL, "the Redis server of -broker redis (keys go under a prefix of their own, deleted afterwards)")
	fs.BoolVar(&c.HoldXmin, "hold-xmin", c.HoldXmin, "drain, staged: keep a transaction holding an xid (the xmin horizon) open from before staging until the phase ends")
	fs.BoolVar(&c.Webhook, "webhook", c.Webhook, "drain, latency: run each alone, beside, beside, alone; beside, a webhook handler drains the same records to a local receiver answering 204")
	fs.IntVar(&c.WebhookMaxInFlight, "webhook-max-in-flight", c.WebhookMaxInFlight, "-webhook: the webhook handler's max_in_flight (0 = its default, 16)")
	fs.BoolVar(&c.WebhookYield, "webhook-yield", c.WebhookYield, "-webhook: the webhook handler's Worker yields to the realtime one while it has a backlog, as herald feed runs them")
	fs.StringVar(&c.WebhookPool, "webhook-pool", c.WebhookPool, "-webhook: the webhook handler's Worker uses the realtime Worker's connection pool (shared, as herald feed) or one of its own (own), without a LISTEN connection (own-poll)")
	fs.DurationVar(&c.WebhookClaimDelay, "webhook-claim-delay", c.WebhookClaimDelay, "-webhook: the webhook handler's claim_delay (0 = its default)")
	fs.DurationVar(&c.WebhookStatsInterval, "webhook-stats-interval", c.WebhookStatsInterval, "-webhook: how often the webhook handler's Worker reads its backlog statistics (0 = the Worker's default)")
	fs.BoolVar(&c.WebhookNull, "webhook-null", c.WebhookNull, "-webhook: deliveries succeed at once, without a request (the handler's store calls alone)")
	fs.IntVar(&c.Records, "records", c.Records, "drain: records staged before the Worker starts; staged: records inserted while it runs")
	fs.IntVar(&c.StagedProducers, "staged-producers", c.StagedProducers, "staged: concurrent producers inserting while the Worker runs")
	fs.IntVar(&c.StagedBatch, "staged-batch", c.StagedBatch, "staged: rows per producer transaction (COPY)")
	fs.IntVar(&c.Channels, "channels", c.Channels, "channels the records spread over")
	fs.IntVar(&c.BatchSize, "batch-size", c.BatchSize, "Worker claim batch size")
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "Worker channels published in parallel per batch")
	fs.IntVar(&c.Lanes, "lanes", c.Lanes, "Worker batches in flight at once (0 = the Worker's default, 4)")
	fs.IntVar(&c.Partitions, "partitions", c.Partitions, "set the outbox's partition count to this after migrating (0 = the schema's own, 4)")
	fs.IntVar(&c.Retained, "retained", c.Retained, "latency, producers: dispatched rows in the table at the start (0 = empty table)")
	fs.IntVar(&c.Rate, "rate", c.Rate, "latency: paced staging rate, records/s")
	fs.DurationVar(&c.LatencyDuration, "latency-duration", c.LatencyDuration, "latency: how long to stage")
	fs.IntVar(&c.LatencyProducers, "latency-producers", c.LatencyProducers, "latency: connections sharing the paced staging")
	fs.DurationVar(&c.SampleWaits, "sample-waits", c.SampleWaits, "latency: sample pg_stat_activity at this interval and print what the active backends did (0 = off)")
	fs.BoolVar(&c.LatencyNotify, "latency-notify", c.LatencyNotify, "latency: keep the NOTIFY wake-up trigger (false = the Worker polls every -poll-interval)")
	fs.DurationVar(&c.PollInterval, "poll-interval", c.PollInterval, "Worker poll interval")
	fs.DurationVar(&c.ActivePollInterval, "active-poll-interval", c.ActivePollInterval, "Worker active poll interval (0 = the Worker's default)")
	fs.DurationVar(&c.CycleInterval, "cycle-interval", c.CycleInterval, "Worker cycle interval: the lead lane's shortest period between claims while records trickle in (0 = the Worker's default, negative = no pacing)")
	fs.IntVar(&c.Producers, "producers", c.Producers, "producers: concurrent single-row producers")
	fs.DurationVar(&c.ProducerDuration, "producer-duration", c.ProducerDuration, "producers: how long each variant runs")
	fs.StringVar(&c.ProducerVariants, "producer-variants", c.ProducerVariants, "producers: variants in run order, comma-separated <worker|none>/<on|off> (a Worker draining or no consumer / NOTIFY trigger)")
	fs.BoolVar(&c.Business, "business", c.Business, "producers: each transaction first inserts a business row (bench_orders), then stages the record")
}

// allPhases are the phases, in the order they run.
var allPhases = []string{"drain", "staged", "latency", "producers"}

// phase reports whether name is among the phases to run.
func (c *config) phase(name string) bool { return benchkit.HasPhase(c.Phases, name) }

func (c *config) validate() error {
	var bad benchkit.FlagErrors
	bad.Add(benchkit.CheckPhases(c.Phases, allPhases...))
	vs, err := parseProducerVariants(c.ProducerVariants)
	bad.Add(err)
	c.variants = vs
	switch c.Broker {
	case "memory", "memory-log":
	case "redis":
		if c.RedisURL == "" {
			bad.Badf("-redis-url: needed with -broker redis")
		}
	default:
		bad.Badf("-broker %q: want memory, memory-log or redis", c.Broker)
	}
	if c.WebhookPool != "shared" && c.WebhookPool != "own" && c.WebhookPool != "own-poll" {
		bad.Badf("-webhook-pool %q: want shared, own or own-poll", c.WebhookPool)
	}
	if c.StagedProducers < 1 || c.StagedBatch < 1 {
		bad.Badf("-staged-producers %d / -staged-batch %d: must be ≥ 1", c.StagedProducers, c.StagedBatch)
	}
	bad.AtLeast("-records", c.Records, 1)
	bad.AtLeast("-retained", c.Retained, 0)
	bad.AtLeast("-channels", c.Channels, 1)
	bad.AtLeast("-batch-size", c.BatchSize, 1)
	bad.Within("-lanes", c.Lanes, 0, 16)
	bad.Within("-partitions", c.Partitions, 0, 256)
	bad.AtLeast("-concurrency", c.Concurrency, 1)
	bad.Add(benchkit.CheckPaced(c.Rate, c.LatencyDuration, c.LatencyProducers))
	bad.AtLeastDuration("-poll-interval", c.PollInterval, time.Millisecond)
	bad.Add(benchkit.CheckUnpaced(c.Producers, c.ProducerDuration))
	return bad.Err()
}
