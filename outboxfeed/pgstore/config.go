package pgstore

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/heraldgw/herald/outboxfeed"
)

// Config selects and tunes a PostgreSQL outbox store.
type Config struct {
	// URL is the database, postgres://… or postgresql://… (required).
	URL string
	// DisableNotifyTrigger leaves out the statement-level AFTER INSERT
	// trigger that runs pg_notify('herald_outbox', '') for each producer
	// statement while a Worker has armed it: Migrate drops it when true and
	// installs it when false, and the store does not LISTEN. Workers then
	// find new records by polling only. Default: false (the trigger is
	// installed).
	DisableNotifyTrigger bool
	// MaxConns bounds the connection pool (the LISTEN connection is
	// separate). Default: 8.
	MaxConns int32
	// Logger receives connection and listener events. Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxConns == 0 {
		c.MaxConns = 8
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case !IsURL(c.URL):
		return fmt.Errorf("%w: URL %q: want postgres://… or postgresql://…", outboxfeed.ErrInvalidConfig, redact(c.URL))
	case c.MaxConns < 1:
		return fmt.Errorf("%w: MaxConns %d: must be ≥ 1", outboxfeed.ErrInvalidConfig, c.MaxConns)
	}
	return nil
}

// IsURL reports whether u names a PostgreSQL database (postgres:// or
// postgresql://).
func IsURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// redact hides a password in a URL shown in an error.
func redact(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.IndexByte(u[i+3:], '@'); j >= 0 {
			return u[:i+3] + "…@" + u[i+3+j+1:]
		}
	}
	return u
}
