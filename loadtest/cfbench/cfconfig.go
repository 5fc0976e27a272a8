package main

import (
	"time"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/cfoutbox"
)

// Names shared by the table, the trigger and Centrifugo's config: those
// of Centrifugo's docs.
const (
	outboxTable   = cfoutbox.DocTable
	notifyChannel = cfoutbox.DocNotifyChannel
	benchNS       = "bench"
	warmupChannel = benchNS + ":warmup"
	consumerName  = "outbox"
)

// outbox is the table every phase uses, with the pg_notify trigger or
// not.
func outbox(trigger bool) cfoutbox.Outbox {
	o := cfoutbox.Outbox{Table: outboxTable}
	if trigger {
		o.Notify = notifyChannel
	}
	return o
}

// cfParams is what varies between the Centrifugo configs one run writes.
type cfParams struct {
	Port         int
	DSN          string
	Partitions   int
	Batch        int
	PollInterval time.Duration
	Notify       bool // set partition_notification_channel (the trigger must exist)
	HMACSecret   string
	APIKey       string
	ChannelLimit int // client.channel_limit: the latency client's server-side subscriptions
	LogLevel     string
}

// renderConfig writes Centrifugo v6's JSON config. Key names are v6.9.1's
// (internal/config/config.go and internal/configtypes): http_server,
// client.token.hmac_secret_key, channel.namespaces, consumers[].postgresql
// (cfoutbox.Consumer).
func renderConfig(p cfParams) ([]byte, error) {
	level := p.LogLevel
	if level == "" {
		level = "info"
	}
	cfg := benchkit.NewCentrifugoConfig(p.Port, level, p.APIKey, p.HMACSecret, benchNS, 100)
	cfg.Client.ChannelLimit = max(p.ChannelLimit, 128)
	cfg.Consumers = []cfoutbox.ConsumerConfig{cfoutbox.Consumer{
		Name: consumerName, DSN: p.DSN, Outbox: outbox(p.Notify),
		Partitions: p.Partitions, Batch: p.Batch, PollInterval: p.PollInterval,
	}.Config()}
	return cfg.JSON()
}
