package outboxfeed

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// DefaultSQLitePath is where the embedded store lives when no database URL
// is configured.
const DefaultSQLitePath = "./herald-data/herald.db"

// Config selects and tunes an outbox store.
type Config struct {
	// DatabaseURL is a postgres:// or postgresql:// URL for PostgreSQL;
	// anything else is the embedded SQLite store: a file path, a
	// sqlite://path URL or a file: URL. Default: DefaultSQLitePath, whose
	// directory is created.
	DatabaseURL string
	// DisableNotifyTrigger leaves out the PostgreSQL statement-level
	// AFTER INSERT trigger that runs pg_notify('herald_outbox', '') for
	// each producer statement: Migrate drops it when true and installs it
	// when false, and the store does not LISTEN. Workers then find new
	// records by polling only. Default: false (the trigger is installed).
	// Ignored by SQLite.
	DisableNotifyTrigger bool
	// MaxConns bounds the PostgreSQL connection pool (the LISTEN connection
	// is separate). Default: 8.
	MaxConns int32
	// BusyTimeout is how long a SQLite statement waits for another writer
	// (another process on the same file) before failing. Default: 5s.
	BusyTimeout time.Duration
	// Logger receives connection and listener events. Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.DatabaseURL == "" {
		c.DatabaseURL = DefaultSQLitePath
	}
	if c.MaxConns == 0 {
		c.MaxConns = 8
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if c.MaxConns < 1 {
		return fmt.Errorf("%w: MaxConns %d: must be ≥ 1", ErrInvalidConfig, c.MaxConns)
	}
	if c.BusyTimeout < 0 {
		return fmt.Errorf("%w: BusyTimeout %v: must not be negative", ErrInvalidConfig, c.BusyTimeout)
	}
	return nil
}

// IsPostgresURL reports whether u selects the PostgreSQL store.
func IsPostgresURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// Open connects to the store cfg selects. It does not migrate; call
// Migrate (herald migrate, and herald serve on start, do).
func Open(ctx context.Context, cfg Config) (Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if IsPostgresURL(cfg.DatabaseURL) {
		return OpenPG(ctx, cfg)
	}
	return OpenSQLite(ctx, cfg)
}
