package fanout

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/heraldgw/herald/fanout/internal/history"
)

// Defaults shared by MemoryConfig and redisbroker.Config, exported for docs and
// the CLI.
const (
	DefaultHistorySize = history.DefaultSize
	DefaultHistoryTTL  = history.DefaultTTL
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

	// HistoryDir, when set, keeps every channel's epoch, offsets and
	// retained history in a log in this directory (created when missing),
	// so that a restarted node carries on where it was: a client resuming
	// inside the history window recovers. Each publication is copied into
	// a memory-mapped segment file (no system call per publication); the
	// kernel's page cache holds it at once, so it survives the process
	// however it ends. Stop syncs the log to the disk and marks it closed.
	// The log is rewritten as a snapshot of the retained history at every
	// start and when it grew (by at least 256 MiB and twice the last
	// snapshot).
	//
	// A log that was not closed and was written before the machine last
	// restarted (power loss, kernel crash), or that is damaged or failed
	// to write, may have lost records on channels it cannot name: the
	// next start keeps none of it, and every channel starts over with a
	// new epoch (resuming clients are told to refresh). Only one broker
	// may use a directory at a time. Linux only (HistoryLogSupported).
	// Empty (the default): the history lives in memory only.
	HistoryDir string

	// segmentSize replaces logSegmentSize (tests).
	segmentSize int

	// Logger receives the history log's problems and its start-up
	// summary. Default: nil, nothing is logged.
	Logger *slog.Logger
}

func (c MemoryConfig) withDefaults() MemoryConfig {
	history.Defaults(&c.HistorySize, &c.HistoryTTL)
	if c.MaxChannels == 0 {
		c.MaxChannels = DefaultMaxChannels
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c MemoryConfig) validate() error {
	if err := history.Check("memory config", c.HistorySize, c.HistoryTTL, ErrInvalidConfig); err != nil {
		return err
	}
	if c.MaxChannels < 1 {
		return fmt.Errorf("fanout: memory config: %w: MaxChannels %d: must be ≥ 1 (0 means %d)", ErrInvalidConfig, c.MaxChannels, DefaultMaxChannels)
	}
	return nil
}
