//go:build !unix

package ws

// canWait is false here: the reader waits for a client's bytes inside
// the WebSocket library, on a larger stack (frameWatch.wait).
const canWait = false

// peekable is not used where canWait is false.
func peekable(uintptr) bool { return true }

// unread is not used where canWait is false.
func unread(uintptr) bool { return false }
