package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// defaultCentrifugo is where `GOBIN=/tmp/cfbin go install
// github.com/centrifugal/centrifugo/v6@v6.9.1` puts the binary.
const defaultCentrifugo = "/tmp/cfbin/centrifugo"

// allPhases are the phases, in the order they run.
var allPhases = []string{"drain", "staged", "latency", "producers"}

// consumerConfig is one shape of Centrifugo's postgresql consumer in the
// drain phases: partition_select_limit and num_partitions.
type consumerConfig struct {
	Batch      int `json:"batch"`
	Partitions int `json:"partitions"`
}

func (c consumerConfig) String() string { return fmt.Sprintf("%dx%d", c.Batch, c.Partitions) }

// parseConsumerConfigs parses "-configs": comma-separated
// <batch>x<partitions> items, e.g. "100x1,1000x1,1000x4".
func parseConsumerConfigs(s string) ([]consumerConfig, error) {
	var out []consumerConfig
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		b, p, ok := strings.Cut(item, "x")
		if !ok {
			return nil, fmt.Errorf("-configs: %q: want <batch>x<partitions>, e.g. 1000x4", item)
		}
		batch, err1 := strconv.Atoi(b)
		parts, err2 := strconv.Atoi(p)
		if err1 != nil || err2 != nil || batch < 1 || parts < 1 || parts > 256 || batch > 100_000 {
			return nil, fmt.Errorf("-configs: %q: batch must be 1–100,000 and partitions 1–256", item)
		}
		out = append(out, consumerConfig{Batch: batch, Partitions: parts})
	}
	if len(out) == 0 {
		return nil, errors.New("-configs: no configuration given")
	}
	return out, nil
}

// config is what one benchmark run does. Every field is a flag.
type config struct {
	DatabaseURL string
	Centrifugo  string
	Phases      string
	Configs     string
	JSON        string
	KeepTemp    bool

	Records      int
	Channels     int
	PollInterval time.Duration

	StagedProducers int
	StagedBatch     int

	Rate                int
	LatencyDuration     time.Duration
	LatencyProducers    int
	LatencyBatch        int
	LatencyPartitions   int
	LatencyPollInterval time.Duration
	LatencyNotify       bool

	Producers        int
	ProducerDuration time.Duration
	ProducerVariants string
	Business         bool

	StartupTimeout time.Duration
	DrainTimeout   time.Duration
	DeliverTimeout time.Duration
	Timeout        time.Duration

	consumers []consumerConfig // parsed Configs
}

func defaultConfig() config {
	return config{
		DatabaseURL: benchkit.DefaultDatabaseURL, Centrifugo: defaultCentrifugo,
		Phases: strings.Join(allPhases, ","), Configs: "100x1,1000x1,1000x4",
		Records: 200_000, Channels: 1_000, PollInterval: 300 * time.Millisecond,
		StagedProducers: 4, StagedBatch: 1_000,
		Rate: 1_000, LatencyDuration: 10 * time.Second, LatencyProducers: 16,
		LatencyBatch: 1_000, LatencyPartitions: 4, LatencyPollInterval: 300 * time.Millisecond, LatencyNotify: true,
		Producers: 16, ProducerDuration: 5 * time.Second, ProducerVariants: "off,on,on,off",
		StartupTimeout: 30 * time.Second, DrainTimeout: 5 * time.Minute, DeliverTimeout: time.Minute,
		Timeout: 30 * time.Minute,
	}
}

func (c *config) register(fs *flag.FlagSet) {
	benchkit.DatabaseURLFlag(fs, &c.DatabaseURL)
	fs.StringVar(&c.Centrifugo, "centrifugo", c.Centrifugo, "Centrifugo v6.9.1 binary (GOBIN=/tmp/cfbin go install github.com/centrifugal/centrifugo/v6@v6.9.1)")
	benchkit.PhasesFlag(fs, &c.Phases, allPhases...)
	fs.StringVar(&c.Configs, "configs", c.Configs, "drain, staged: consumer shapes, comma-separated <partition_select_limit>x<num_partitions>")
	fs.StringVar(&c.JSON, "json", c.JSON, "also write the results as JSON to this file (\"-\": JSON to stdout instead of the markdown report)")
	fs.BoolVar(&c.KeepTemp, "keep-temp", c.KeepTemp, "keep the temp dir with Centrifugo's configs and logs")
	fs.IntVar(&c.Records, "records", c.Records, "drain, staged: records per measurement")
	fs.IntVar(&c.Channels, "channels", c.Channels, "channels the records spread over (bench:ch-<i mod channels>)")
	fs.DurationVar(&c.PollInterval, "poll-interval", c.PollInterval, "drain, staged: partition_poll_interval")
	fs.IntVar(&c.StagedProducers, "staged-producers", c.StagedProducers, "staged: concurrent producers inserting while Centrifugo runs")
	fs.IntVar(&c.StagedBatch, "staged-batch", c.StagedBatch, "staged: rows per producer transaction")
	fs.IntVar(&c.Rate, "rate", c.Rate, "latency: paced staging rate, records/s")
	fs.DurationVar(&c.LatencyDuration, "latency-duration", c.LatencyDuration, "latency: how long to stage")
	fs.IntVar(&c.LatencyProducers, "latency-producers", c.LatencyProducers, "latency: connections sharing the paced staging")
	fs.IntVar(&c.LatencyBatch, "latency-batch", c.LatencyBatch, "latency: partition_select_limit")
	fs.IntVar(&c.LatencyPartitions, "latency-partitions", c.LatencyPartitions, "latency: num_partitions")
	fs.DurationVar(&c.LatencyPollInterval, "latency-poll-interval", c.LatencyPollInterval, "latency: partition_poll_interval")
	fs.BoolVar(&c.LatencyNotify, "latency-notify", c.LatencyNotify, "latency: install the documented per-row pg_notify trigger and set partition_notification_channel")
	fs.IntVar(&c.Producers, "producers", c.Producers, "producers: concurrent single-row producers (no consumer running)")
	fs.DurationVar(&c.ProducerDuration, "producer-duration", c.ProducerDuration, "producers: how long each variant runs")
	fs.StringVar(&c.ProducerVariants, "producer-variants", c.ProducerVariants, "producers: per variant, comma-separated, in run order: off or on (no consumer, pg_notify trigger off or on), or consumer (the trigger on and Centrifugo consuming in the latency phase's shape)")
	fs.BoolVar(&c.Business, "business", c.Business, "producers: each transaction first inserts a business row (bench_orders), then the outbox record")
	fs.DurationVar(&c.StartupTimeout, "startup-timeout", c.StartupTimeout, "how long Centrifugo may take to serve /health and consume a warm-up row")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "drain, staged: bound on one measurement")
	fs.DurationVar(&c.DeliverTimeout, "deliver-timeout", c.DeliverTimeout, "latency: how long after staging ends every record may take to arrive")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "bound on the whole run")
}

// phase reports whether name is among the phases to run.
func (c *config) phase(name string) bool { return benchkit.HasPhase(c.Phases, name) }

// producerVariant is one run of the producers phase: the pg_notify
// trigger installed or not, and Centrifugo consuming or no consumer.
type producerVariant struct {
	Trigger  bool
	Consumer bool
}

func (v producerVariant) String() string {
	if v.Consumer {
		return "Centrifugo consuming, pg_notify trigger on"
	}
	return "no consumer, pg_notify trigger " + benchkit.OnOff(v.Trigger)
}

// producerVariants is -producer-variants parsed.
func (c *config) producerVariants() []producerVariant {
	var out []producerVariant
	for v := range strings.SplitSeq(c.ProducerVariants, ",") {
		switch strings.TrimSpace(v) {
		case "on":
			out = append(out, producerVariant{Trigger: true})
		case "consumer":
			out = append(out, producerVariant{Trigger: true, Consumer: true})
		default:
			out = append(out, producerVariant{})
		}
	}
	return out
}

func (c *config) validate() error {
	var bad benchkit.FlagErrors
	bad.Add(benchkit.CheckPhases(c.Phases, allPhases...))
	cs, err := parseConsumerConfigs(c.Configs)
	bad.Add(err)
	c.consumers = cs
	for v := range strings.SplitSeq(c.ProducerVariants, ",") {
		if v = strings.TrimSpace(v); v != "on" && v != "off" && v != "consumer" {
			bad.Badf("-producer-variants: %q: want on, off or consumer", v)
		}
	}
	if c.Centrifugo == "" && (c.phase("drain") || c.phase("staged") || c.phase("latency") || (c.phase("producers") && strings.Contains(c.ProducerVariants, "consumer"))) {
		bad.Badf("-centrifugo: a binary is needed for the drain, staged and latency phases and the producers' consumer variant")
	}
	bad.AtLeast("-records", c.Records, 1)
	bad.Within("-channels", c.Channels, 1, 100_000)
	if c.PollInterval < time.Millisecond || c.LatencyPollInterval < time.Millisecond {
		bad.Badf("-poll-interval / -latency-poll-interval: must be ≥ 1ms")
	}
	if c.StagedProducers < 1 || c.StagedBatch < 1 {
		bad.Badf("-staged-producers %d / -staged-batch %d: must be ≥ 1", c.StagedProducers, c.StagedBatch)
	}
	bad.Add(benchkit.CheckPaced(c.Rate, c.LatencyDuration, c.LatencyProducers))
	if c.LatencyBatch < 1 || c.LatencyPartitions < 1 || c.LatencyPartitions > 256 {
		bad.Badf("-latency-batch %d / -latency-partitions %d: batch ≥ 1, partitions 1–256", c.LatencyBatch, c.LatencyPartitions)
	}
	bad.Add(benchkit.CheckUnpaced(c.Producers, c.ProducerDuration))
	for name, d := range map[string]time.Duration{"-startup-timeout": c.StartupTimeout, "-drain-timeout": c.DrainTimeout,
		"-deliver-timeout": c.DeliverTimeout, "-timeout": c.Timeout} {
		bad.AtLeastDuration(name, d, time.Second)
	}
	return bad.Err()
}
