package outboxfeed

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/heraldgw/herald/outboxfeed/stage"
)

// Stage inserts n into herald.outbox inside the caller's transaction and
// returns the message id. It never opens a connection of its own: the
// record commits or rolls back with the caller's business change. It is
// stage.Stage, which an application can import without this package.
func Stage(ctx context.Context, tx pgx.Tx, n Notification) (string, error) {
	return stage.Stage(ctx, tx, n)
}

// validUUID reports whether s is a message id in its 36-character form.
func validUUID(s string) bool {
	_, err := stage.ParseID(s)
	return err == nil
}
