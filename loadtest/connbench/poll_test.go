package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
)

// TestPollAgainstPush: the poll scenario serves the same updates to every
// client by polling and by SSE, each once and in order, and measures both
// ways: a poller sees an update within about one interval of its COMMIT,
// a push subscriber sooner; each way costs its server and the database
// CPU and puts bytes on the clients' connections.
func TestPollAgainstPush(t *testing.T) {
	cfg := defaultConfig()
	cfg.Scenario, cfg.Conns, cfg.Channels, cfg.Rate = "poll", 20, 4, 20
	cfg.Duration, cfg.Drain, cfg.PollInterval = time.Second, 10*time.Second, 200*time.Millisecond
	cfg.DatabaseURL, cfg.HeraldBin = testenv.BaseDatabaseURL(), heraldBin
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	poll, push, err := pollAgainstPush(ctx, cfg, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	const updates, due = 20, 20 * 20 / 4 // each client every update of its channel
	for _, p := range []*phaseResult{poll, push} {
		if p.updates != updates || p.expected != due || p.delivered != due || p.missing+p.dups+p.ooo+p.errors != 0 {
			t.Errorf("%s: %d updates, %d of %d delivered, %d missing, %d repeated, %d out of order, %d failed",
				p.name, p.updates, p.delivered, p.expected, p.missing, p.dups, p.ooo, p.errors)
		}
		if p.stale.N != due || p.stale.Max > 10*time.Second {
			t.Errorf("%s: staleness %+v: want %d samples, none over 10s", p.name, p.stale, due)
		}
		if p.serverCPU <= 0 || p.wireBytes <= 0 || p.window <= 0 {
			t.Errorf("%s: server CPU %v, %d bytes, over %v: want each > 0", p.name, p.serverCPU, p.wireBytes, p.window)
		}
	}
	// A poller asks on its interval, however many updates came: over a
	// second of updates polled every 200ms, twice per client at the very
	// least. (How many more depends on the CPU the pollers got: a busy
	// machine runs their ticks late.)
	if min := 2 * int64(cfg.Conns); poll.requests < min {
		t.Errorf("%d polls, want at least %d (two per client)", poll.requests, min)
	}
	if push.requests != 0 {
		t.Errorf("push made %d polls", push.requests)
	}
}

// TestConfigPoll: the poll scenario needs a PostgreSQL server, starts its
// own children, and polls at a sane interval.
func TestConfigPoll(t *testing.T) {
	pg := "postgres://postgres@127.0.0.1:5432/test"
	cases := []struct {
		name string
		set  func(*config)
		want string // "" = valid
	}{
		{"valid", func(c *config) { c.DatabaseURL = pg }, ""},
		{"no database", func(*config) {}, "needs -database-url"},
		{"interval too short", func(c *config) { c.DatabaseURL, c.PollInterval = pg, time.Millisecond }, "-poll-interval 1ms"},
		{"a running server", func(c *config) { c.DatabaseURL, c.URL, c.Secret = pg, "http://127.0.0.1:8080", "s" }, "starts its own children"},
		{"centrifugo", func(c *config) { c.DatabaseURL, c.Server = pg, "centrifugo" }, "starts its own children"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultConfig()
			c.Scenario = "poll"
			tc.set(&c)
			err := c.validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			case tc.want == "" && (c.Transport != "sse" || c.PublishVia != "outbox" || c.Producers != 1):
				t.Fatalf("push side %s via %s with %d producers, want sse via outbox with 1", c.Transport, c.PublishVia, c.Producers)
			}
		})
	}
}
