// Package testclient holds the one SSE client and the one herald.v1
// WebSocket client that Herald's tests use against a real server. Each
// reads its connection in one goroutine of its own, hands what it reads
// to the test over a channel, and stops when the connection ends or the
// test closes it; Close waits for that goroutine, so a test that closes
// every client it opens leaks none.
//
// The clients know the wire formats (SSE blocks, newline-separated JSON
// frames in WebSocket messages) and nothing of the gateway's types: a
// test parses the frames it gets into its own.
package testclient
