package outboxfeed

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

const pgInsert = `
INSERT INTO herald.outbox (id, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind)
VALUES (coalesce($1::uuid, gen_random_uuid()), $2, $3, $4, $5, $6::jsonb,
        coalesce($7::jsonb, '{"mode":"immediate"}'::jsonb),
        coalesce($8::timestamptz, now()), coalesce($9::text, 'notification'))
RETURNING id::text`

// Stage inserts n into herald.outbox inside the caller's transaction and
// returns the message id. It never opens a connection of its own: the
// record commits or rolls back with the caller's business change.
func Stage(ctx context.Context, tx pgx.Tx, n Notification) (string, error) {
	if err := n.Validate(); err != nil {
		return "", err
	}
	if n.ID != "" && !validUUID(n.ID) {
		return "", fmt.Errorf("outboxfeed: id %q is not a uuid", n.ID)
	}
	var id string
	err := tx.QueryRow(ctx, pgInsert,
		nullable(n.ID), n.TenantID, n.Channel, n.Type, n.SchemaVersion, n.Payload,
		nullableJSON(n.Freshness), nullableTime(n), nullable(n.Kind)).Scan(&id)
	if err != nil {
		return "", fmt.Errorf("outboxfeed: stage: %w", err)
	}
	return id, nil
}

func validUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	_, err := uuid.Parse(s)
	return err == nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullableJSON(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

func nullableTime(n Notification) any {
	if n.OccurredAt.IsZero() {
		return nil
	}
	return n.OccurredAt
}
