//go:build unix

package ws

import (
	"errors"
	"syscall"
)

// canWait says that a reader can wait for a socket's bytes without
// reading them (frameWatch.wait).
const canWait = true

// peekable reports whether the socket fd has a byte to read, an end or an
// error: anything but "nothing yet", for which RawConn.Read waits.
func peekable(fd uintptr) bool {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
	return !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR)
}

// unread reports whether the socket fd holds bytes not read yet; it never
// waits.
func unread(fd uintptr) bool {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err == nil && n > 0
}
