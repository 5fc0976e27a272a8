package main

import (
	"fmt"
	"time"
)

// perSecond formats a rate.
func perSecond(n int64, d time.Duration) string {
	if d <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f/s", float64(n)/d.Seconds())
}
