// Package history holds the history settings every fanout broker has
// (HistorySize, HistoryTTL): their defaults and their bounds, shared by
// fanout's memory broker and the brokers in subpackages.
package history

import (
	"fmt"
	"time"
)

// The defaults of HistorySize and HistoryTTL.
const (
	DefaultSize = 1000
	DefaultTTL  = 24 * time.Hour
)

// Defaults replaces a zero size or ttl with its default.
func Defaults(size *int, ttl *time.Duration) {
	if *size == 0 {
		*size = DefaultSize
	}
	if *ttl == 0 {
		*ttl = DefaultTTL
	}
}

// Check refuses a size below 1 or a ttl below 1ms, as
// "fanout: <config>: <invalid>: …".
func Check(config string, size int, ttl time.Duration, invalid error) error {
	if size < 1 {
		return fmt.Errorf("fanout: %s: %w: HistorySize %d: must be ≥ 1 (0 means %d)", config, invalid, size, DefaultSize)
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("fanout: %s: %w: HistoryTTL %s: must be ≥ 1ms (0 means %s)", config, invalid, ttl, DefaultTTL)
	}
	return nil
}
