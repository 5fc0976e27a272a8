// Package fanout carries publications from a broker to the connections of
// this node.
//
// A Broker gives every publication of a channel a position (offset, epoch),
// keeps a bounded history per channel, and tells every node's Hub about it.
// Publishing is idempotent by message id while the id is in that history.
// The Hub hands each publication, encoded once, to the local subscribers of
// its channel with a non-blocking enqueue; it never waits on a client.
//
// MemoryBroker serves a single node; with MemoryConfig.HistoryDir its
// history outlives the process in a memory-mapped log. RedisBroker serves
// many: one Lua
// script per publication appends to the channel's Redis stream and
// publishes on its pub/sub channel, and each node holds one pub/sub
// connection for the channels its connections follow (one per primary in
// a Redis Cluster); a single server may be a Sentinel deployment's
// primary, followed through failovers, the subscription checked by a
// heartbeat. Wiring:
//
//	broker, _ := fanout.NewRedisBroker(fanout.RedisConfig{URL: url})
//	hub, _ := fanout.NewHub(broker, fanout.HubConfig{})
//	_ = broker.Start(ctx, hub)
//	defer broker.Stop()
//
// Every publication reaches a client as its publication envelope (docs/protocol.md) (see
// Prepared), one compact JSON line.
package fanout
