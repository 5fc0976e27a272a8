package outboxfeed

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"
)

const sqliteInsert = `
INSERT INTO outbox (id, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

// StageSQL inserts n into the SQLite outbox inside the caller's
// transaction and returns the message id (generated here when n.ID is
// empty). It never opens a connection of its own.
func StageSQL(ctx context.Context, tx *sql.Tx, n Notification) (string, error) {
	if err := n.Validate(); err != nil {
		return "", err
	}
	id, err := canonicalID(n.ID)
	if err != nil {
		return "", err
	}
	occurred := n.OccurredAt
	if occurred.IsZero() {
		occurred = time.Now()
	}
	freshness := string(n.Freshness)
	if n.Freshness == nil {
		freshness = `{"mode":"immediate"}`
	}
	kind := n.Kind
	if kind == "" {
		kind = KindNotification
	}
	_, err = tx.ExecContext(ctx, sqliteInsert, id, n.TenantID, n.Channel, n.Type, n.SchemaVersion,
		string(n.Payload), freshness, occurred.UnixMicro(), kind)
	if err != nil {
		return "", fmt.Errorf("outboxfeed: stage: %w", err)
	}
	return id, nil
}

// canonicalID returns id in canonical lower-case form, or a new random
// uuid when id is empty.
func canonicalID(id string) (string, error) {
	if id == "" {
		return uuid.NewString(), nil
	}
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return "", fmt.Errorf("outboxfeed: id %q is not a uuid", id)
	}
	return u.String(), nil
}
