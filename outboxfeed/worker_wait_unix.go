//go:build unix

package outboxfeed

import (
	"errors"
	"syscall"
	"time"
)

// preciseSleep sleeps d in the kernel (nanosleep), which wakes the thread
// within the timer slack (50µs by default on Linux) however idle the
// process is.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	for {
		var left syscall.Timespec
		err := syscall.Nanosleep(&ts, &left)
		if !errors.Is(err, syscall.EINTR) {
			return
		}
		ts = left
	}
}
