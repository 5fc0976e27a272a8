package main

import (
	"encoding/json"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/cfoutbox"
)

// These tests cover pure helpers only: nothing here needs PostgreSQL or
// the Centrifugo binary.

func TestParseConsumerConfigs(t *testing.T) {
	got, err := parseConsumerConfigs("100x1, 1000x1,1000x4")
	if err != nil {
		t.Fatal(err)
	}
	want := []consumerConfig{{100, 1}, {1000, 1}, {1000, 4}}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	for _, bad := range []string{"", "100", "x4", "100x0", "0x1", "ax1", "100x1000"} {
		if _, err := parseConsumerConfigs(bad); err == nil {
			t.Errorf("parseConsumerConfigs(%q): no error", bad)
		}
	}
}

func TestRenderConfig(t *testing.T) {
	b, err := renderConfig(cfParams{Port: 8123, DSN: "postgres://x/y", Partitions: 4, Batch: 1000,
		PollInterval: 300 * time.Millisecond, Notify: true, HMACSecret: "s", APIKey: "k", ChannelLimit: 1001})
	if err != nil {
		t.Fatal(err)
	}
	var c benchkit.CentrifugoConfig
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.HTTPServer.Address != "127.0.0.1" || c.HTTPServer.Port != 8123 || !c.UsageStats.Disabled ||
		c.HTTPAPI.Key != "k" || c.Client.Token.HMACSecretKey != "s" || c.Client.ChannelLimit != 1001 {
		t.Fatalf("server settings: %s", b)
	}
	if ns := c.Channel.Namespaces; len(ns) != 1 || ns[0].Name != "bench" || ns[0].HistorySize != 100 || ns[0].HistoryTTL != "300s" || !ns[0].AllowSubscribeForClient {
		t.Fatalf("namespaces: %s", b)
	}
	want := cfoutbox.ConsumerConfig{Name: consumerName, Enabled: true, Type: "postgresql", PostgreSQL: cfoutbox.PostgreSQLConfig{
		DSN: "postgres://x/y", OutboxTableName: "outbox", NumPartitions: 4, PartitionSelectLimit: 1000,
		PartitionPollInterval: "300ms", PartitionNotificationChannel: "centrifugo_partition_change",
	}}
	if len(c.Consumers) != 1 || c.Consumers[0] != want {
		t.Fatalf("consumers: %s", b)
	}
	b, _ = renderConfig(cfParams{Partitions: 1, Batch: 100, PollInterval: time.Second})
	if strings.Contains(string(b), "partition_notification_channel") || !strings.Contains(string(b), `"channel_limit": 128`) {
		t.Fatalf("without notify: %s", b)
	}
}

func TestPayloadAndPerChannel(t *testing.T) {
	if got, want := string(payload(1234, 1000)), `{"channel":"bench:ch-234","data":{"n":1234,"note":"outbox benchmark record"}}`; got != want {
		t.Fatalf("payload = %s, want %s", got, want)
	}
	var v map[string]any
	if err := json.Unmarshal(payload(5, 1000), &v); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ n, channels, ch, want int }{
		{200_000, 1000, 0, 200}, {1, 1000, 0, 1}, {1001, 1000, 0, 2}, {1001, 1000, 1, 1}, {5, 1000, 7, 0},
	} {
		count := 0
		for i := range c.n {
			if i%c.channels == c.ch {
				count++
			}
		}
		if count != c.want || perChannel(c.n, c.channels, c.ch) != c.want {
			t.Errorf("perChannel(%d, %d, %d) = %d, counted %d, want %d", c.n, c.channels, c.ch, perChannel(c.n, c.channels, c.ch), count, c.want)
		}
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 54321.4: "54,321", 1234567: "1,234,567", -1500: "-1,500"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestDefaultsValidate(t *testing.T) {
	cfg := defaultConfig()
	cfg.register(flag.NewFlagSet("t", flag.ContinueOnError))
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if len(cfg.consumers) != 3 || cfg.consumers[2] != (consumerConfig{1000, 4}) {
		t.Fatalf("consumers %v", cfg.consumers)
	}
	if v := cfg.producerVariants(); len(v) != 4 || v[0].Trigger || !v[1].Trigger || v[1].Consumer {
		t.Fatalf("variants %v", v)
	}
	cfg.ProducerVariants = "off, consumer"
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if v := cfg.producerVariants(); len(v) != 2 || v[0] != (producerVariant{}) || v[1] != (producerVariant{Trigger: true, Consumer: true}) {
		t.Fatalf("variants %v", v)
	}
	cfg.ProducerVariants = "off,sometimes"
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), `"sometimes": want on, off or consumer`) {
		t.Fatalf("validate with an unknown variant: %v", err)
	}
	cfg.ProducerVariants = "off,on"
	cfg.Phases, cfg.Records = "drain,bogus", 0
	if err := cfg.validate(); err == nil {
		t.Fatal("no error")
	}
}

// The producers' ratio compares the runs with Centrifugo consuming with
// those with no consumer and no trigger, leaving out the trigger-only ones.
func TestProducerRatio(t *testing.T) {
	r := &report{Producers: []producerResult{
		{PerS: 4000}, {Trigger: true, Consumer: true, PerS: 800}, {Trigger: true, PerS: 1500},
		{Trigger: true, Consumer: true, PerS: 1000}, {PerS: 5000},
	}}
	var b strings.Builder
	r.printProducerRatio(&b)
	if want := "(2 and 2 runs) | **0.200** (900/s / 4,500/s)"; !strings.Contains(b.String(), want) {
		t.Errorf("ratio row %q, want it to contain %q", b.String(), want)
	}
}
