package main

import (
	"flag"
	"strings"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/outboxfeed/webhook"
)

// config is what one benchmark run does. Every field is a flag.
type config struct {
	// DatabaseURL names the server and a database to connect to while the
	// benchmark creates (and later drops) its own. Default:
	// benchkit.DefaultDatabaseURL.
	DatabaseURL string
	// Variants lists what each round runs, comma-separated, in the first
	// round's order (the next round reverses it): worker, endpoint, floor.
	// Default: floor,worker,endpoint.
	Variants string
	// Rounds is how many times every variant runs. Default: 4.
	Rounds int
	// Records is how many records (requests) one variant sends per round.
	// Default: 30,000.
	Records int
	// Channels is how many channels the records spread over. Default: 1,000.
	Channels int
	// MaxInFlight is the endpoint's max_in_flight, and the floor's
	// concurrency. Default: the endpoint's default (16).
	MaxInFlight int
	// BatchSize and Lanes are the Worker's claim batch and batches in
	// flight. Default: 0, the Worker's defaults (1,000 and 4).
	BatchSize, Lanes int
}

// allVariants are the variants.
var allVariants = []string{"worker", "endpoint", "floor"}

func defaultConfig() config {
	return config{
		DatabaseURL: benchkit.DefaultDatabaseURL, Variants: "floor,worker,endpoint", Rounds: 4,
		Records: 30_000, Channels: 1_000, MaxInFlight: webhook.Config{}.WithDefaults().MaxInFlight,
	}
}

func (c *config) register(fs *flag.FlagSet) {
	benchkit.DatabaseURLFlag(fs, &c.DatabaseURL)
	fs.StringVar(&c.Variants, "variants", c.Variants, "comma-separated variants, in the first round's order (reversed every other round): worker, endpoint, floor")
	fs.IntVar(&c.Rounds, "rounds", c.Rounds, "how many times every variant runs")
	fs.IntVar(&c.Records, "records", c.Records, "records (requests) per variant per round")
	fs.IntVar(&c.Channels, "channels", c.Channels, "channels the records spread over")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", c.MaxInFlight, "the endpoint's max_in_flight and the floor's concurrency")
	fs.IntVar(&c.BatchSize, "batch-size", c.BatchSize, "worker: the Worker's claim batch (0 = its default, 1,000)")
	fs.IntVar(&c.Lanes, "lanes", c.Lanes, "worker: the Worker's batches in flight (0 = its default, 4)")
}

// variants is the first round's order.
func (c *config) variants() []string {
	var out []string
	for v := range strings.SplitSeq(c.Variants, ",") {
		out = append(out, strings.TrimSpace(v))
	}
	return out
}

func (c *config) validate() error {
	var bad benchkit.FlagErrors
	bad.Add(benchkit.CheckPhases(c.Variants, allVariants...))
	bad.AtLeast("-rounds", c.Rounds, 1)
	bad.AtLeast("-records", c.Records, 1)
	bad.AtLeast("-channels", c.Channels, 1)
	if c.BatchSize < 0 || c.Lanes < 0 {
		bad.Badf("-batch-size %d / -lanes %d: must be ≥ 0", c.BatchSize, c.Lanes)
	}
	bad.AtLeast("-max-in-flight", c.MaxInFlight, 1)
	return bad.Err()
}
