// Package fanout carries publications from a broker to the connections of
// this node.
//
// A Broker gives every publication of a channel a position (offset, epoch),
// keeps a bounded history per channel, and tells every node's Hub about it.
// The Hub hands each publication, encoded once, to the local subscribers of
// its channel with a non-blocking enqueue; it never waits on a client.
package fanout
