// Package outboxdb opens the outbox store a URL names — PostgreSQL
// (outboxfeed/pgstore) or the embedded SQLite file
// (outboxfeed/sqlitestore) — for programs that leave the choice to their
// configuration, as the herald binary does. A program that knows its
// store imports only that store's package.
package outboxdb

import (
	"context"
	"log/slog"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/pgstore"
	"github.com/heraldgw/herald/outboxfeed/sqlitestore"
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
	// DisableNotifyTrigger: pgstore.Config.DisableNotifyTrigger (ignored
	// by SQLite). Default: false.
	DisableNotifyTrigger bool
	// MaxConns: pgstore.Config.MaxConns. Default: 8.
	MaxConns int32
	// BusyTimeout: sqlitestore.Config.BusyTimeout. Default: 5s.
	BusyTimeout time.Duration
	// Logger receives the store's events. Default: discard.
	Logger *slog.Logger
}

// IsPostgresURL reports whether u selects the PostgreSQL store.
func IsPostgresURL(u string) bool { return pgstore.IsURL(u) }

// Open connects to the store cfg selects. It does not migrate; call
// Migrate (herald migrate, and herald serve on start, do).
func Open(ctx context.Context, cfg Config) (outboxfeed.Store, error) {
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = DefaultSQLitePath
	}
	if IsPostgresURL(cfg.DatabaseURL) {
		return pgstore.Open(ctx, pgstore.Config{URL: cfg.DatabaseURL, DisableNotifyTrigger: cfg.DisableNotifyTrigger,
			MaxConns: cfg.MaxConns, Logger: cfg.Logger})
	}
	return sqlitestore.Open(ctx, sqlitestore.Config{Path: cfg.DatabaseURL, BusyTimeout: cfg.BusyTimeout, Logger: cfg.Logger})
}
