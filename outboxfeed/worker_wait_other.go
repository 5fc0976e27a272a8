//go:build !unix

package outboxfeed

import "time"

// preciseSleep sleeps d (a runtime timer: no finer means here).
func preciseSleep(d time.Duration) { time.Sleep(d) }
