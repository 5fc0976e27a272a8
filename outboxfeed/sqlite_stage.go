package outboxfeed

import (
	"context"
	"database/sql"

	"github.com/heraldgw/herald/outboxfeed/stage"
)

// StageSQL inserts n into the SQLite outbox inside the caller's
// transaction and returns the message id (generated here when n.ID is
// empty). It never opens a connection of its own. It is
// stage.StageSQL(ctx, tx, stage.SQLite, n); for PostgreSQL through
// database/sql call stage.StageSQL with stage.Postgres.
func StageSQL(ctx context.Context, tx *sql.Tx, n Notification) (string, error) {
	return stage.StageSQL(ctx, tx, stage.SQLite, n)
}

// canonicalID returns id in canonical lower-case form, or a new
// time-ordered one (stage.NewID) when id is empty.
func canonicalID(id string) (string, error) {
	if id == "" {
		return stage.NewID()
	}
	return stage.ParseID(id)
}
