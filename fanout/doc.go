// Package fanout carries publications from a broker to the connections of
// this node.
//
// A Broker gives every publication of a channel a position (offset, epoch),
// keeps a bounded history per channel, and tells every node's Hub about it.
// Publishing is idempotent by message id while the id is in that history.
// The Hub hands each publication, encoded once, to the local subscribers of
// its channel with a non-blocking enqueue; it never waits on a client.
// A publisher with several messages of one channel ready may publish them
// as a run (RunPublisher, which MemoryBroker implements): the Hub hands
// the run to each subscriber at once, so a connection writes it in one
// write.
//
// MemoryBroker serves a single node; with MemoryConfig.HistoryDir its
// history outlives the process in a memory-mapped log. The Redis broker,
// which serves many nodes, is in package fanout/redisbroker, so a program
// that only speaks this vocabulary (the outbox Worker and its stores) does
// not link a Redis client; it builds on what every broker shares here
// (ValidateKey, NewPublication, NewEpoch, EnvelopeParts,
// PreparedFromEnvelope). Package fanout/fanouttest is the conformance suite
// every broker runs. Wiring:
//
//	broker, _ := fanout.NewMemoryBroker(fanout.MemoryConfig{})
//	hub, _ := fanout.NewHub(broker, fanout.HubConfig{})
//	_ = broker.Start(ctx, hub)
//	defer broker.Stop()
//
// Every publication reaches a client as its publication envelope (docs/protocol.md) (see
// Prepared), one compact JSON line.
package fanout
