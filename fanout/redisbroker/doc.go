// Package redisbroker is the fanout.Broker of a multi-node deployment.
//
// One Lua script per publication appends to the channel's Redis stream and
// publishes on its pub/sub channel, and each node holds one pub/sub
// connection for the channels its connections follow (one per primary in
// a Redis Cluster); a single server may be a Sentinel deployment's
// primary, followed through failovers, the subscription checked by a
// heartbeat. Wiring:
//
//	broker, _ := redisbroker.New(redisbroker.Config{URL: url})
//	hub, _ := fanout.NewHub(broker, fanout.HubConfig{})
//	_ = broker.Start(ctx, hub)
//	defer broker.Stop()
//
// It is a package of its own so that what only speaks fanout's vocabulary
// (the outbox Worker and its stores) links no Redis client.
package redisbroker
