//go:build !linux

package ws

// parkState is empty here: an idle connection's reader waits in a
// goroutine of its own (frameWatch.wait).
type parkState struct{}

// parks is false here: the reader waits for the client's bytes.
func (c *frameWatch) parks() bool { return false }

// park never parks here.
func (c *frameWatch) park(func()) bool { return false }

// IdleGoroutines is how many goroutines an idle connection holds: its
// reader, here.
func IdleGoroutines() int { return 1 }
