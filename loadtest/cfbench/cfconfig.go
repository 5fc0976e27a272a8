package main

import (
	"encoding/json"
	"time"

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
	consumers := []any{cfoutbox.Consumer{
		Name: consumerName, DSN: p.DSN, Outbox: outbox(p.Notify),
		Partitions: p.Partitions, Batch: p.Batch, PollInterval: p.PollInterval,
	}.Config()}
	cfg := map[string]any{
		"http_server": map[string]any{"address": "127.0.0.1", "port": p.Port},
		"log":         map[string]any{"level": level},
		"usage_stats": map[string]any{"disabled": true},
		"health":      map[string]any{"enabled": true},
		"http_api":    map[string]any{"key": p.APIKey},
		"client": map[string]any{
			"token":         map[string]any{"hmac_secret_key": p.HMACSecret},
			"channel_limit": max(p.ChannelLimit, 128),
		},
		"channel": map[string]any{
			"namespaces": []any{map[string]any{
				"name":                       benchNS,
				"history_size":               100,
				"history_ttl":                "300s",
				"allow_subscribe_for_client": true,
			}},
		},
		"consumers": consumers,
	}
	return json.MarshalIndent(cfg, "", "  ")
}
