package fanout

import (
	"fmt"
	"time"
)

// Defaults shared by MemoryConfig and RedisConfig, exported for docs and
// the CLI.
const (
	DefaultHistorySize = 1000
	DefaultHistoryTTL  = 24 * time.Hour
	DefaultMaxChannels = 100000
)

// MemoryConfig configures a MemoryBroker. The zero value of every field
// means its documented default.
type MemoryConfig struct {
	// HistorySize is how many of its latest publications each channel
	// keeps for Recover. Default 1000.
	HistorySize int

	// HistoryTTL is how long a channel with no publication keeps its
	// history and epoch; after it the channel starts over with a new epoch
	// (as a Redis stream expires). Measured from the last publication, or
	// from creation when there was none. Default 24h.
	HistoryTTL time.Duration

	// MaxChannels bounds the channels whose history is kept. Creating one
	// beyond it evicts the channels idle longest (about 1% of MaxChannels
	// at a time); an evicted channel that is used again starts over with a
	// new epoch. Default 100000.
	MaxChannels int
}

func (c MemoryConfig) withDefaults() MemoryConfig {
	if c.HistorySize == 0 {
		c.HistorySize = DefaultHistorySize
	}
	if c.HistoryTTL == 0 {
		c.HistoryTTL = DefaultHistoryTTL
	}
	if c.MaxChannels == 0 {
		c.MaxChannels = DefaultMaxChannels
	}
	return c
}

func (c MemoryConfig) validate() error {
	if c.HistorySize < 1 {
		return fmt.Errorf("fanout: memory config: %w: HistorySize %d: must be ≥ 1 (0 means %d)", ErrInvalidConfig, c.HistorySize, DefaultHistorySize)
	}
	if c.HistoryTTL < time.Millisecond {
		return fmt.Errorf("fanout: memory config: %w: HistoryTTL %s: must be ≥ 1ms (0 means %s)", ErrInvalidConfig, c.HistoryTTL, DefaultHistoryTTL)
	}
	if c.MaxChannels < 1 {
		return fmt.Errorf("fanout: memory config: %w: MaxChannels %d: must be ≥ 1 (0 means %d)", ErrInvalidConfig, c.MaxChannels, DefaultMaxChannels)
	}
	return nil
}
