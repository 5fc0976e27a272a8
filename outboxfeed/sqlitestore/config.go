package sqlitestore

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
)

// Config selects and tunes an embedded SQLite outbox store.
type Config struct {
	// Path is the database file: a path, sqlite://path or file:path
	// (required). Its directory is created when missing.
	Path string
	// BusyTimeout is how long a statement waits for another writer
	// (another process on the same file) before failing. Default: 5s.
	BusyTimeout time.Duration
	// Logger receives store events. Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.BusyTimeout == 0 {
		c.BusyTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if c.BusyTimeout < 0 {
		return fmt.Errorf("%w: BusyTimeout %v: must not be negative", outboxfeed.ErrInvalidConfig, c.BusyTimeout)
	}
	return nil
}
