package stage

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/heraldgw/herald/outboxfeed/internal/rules"

	"github.com/jackc/pgx/v5"
)

// pgInsert stages on PostgreSQL; the database fills what the producer left
// empty but the id, which NewID makes. The id is the one sent, in the
// canonical form the database prints, so nothing is returned: a
// statement that sends no row back costs the producer and the backend
// less.
const pgInsert = `
INSERT INTO herald.outbox (id, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind)
VALUES ($1::uuid, $2, $3, $4, $5, $6::jsonb,
        coalesce($7::jsonb, '{"mode":"immediate"}'::jsonb),
        coalesce($8::timestamptz, now()), coalesce($9::text, 'notification'))`

// pgInsertDefaults stages a notification that leaves freshness,
// occurred_at and kind to the columns' defaults (the same values pgInsert
// gives them): the statement most producers send, with six parameters
// instead of nine and no expressions for the backend to build and
// evaluate in each insert.
const pgInsertDefaults = `
INSERT INTO herald.outbox (id, tenant_id, channel, type, schema_version, payload)
VALUES ($1::uuid, $2, $3, $4, $5, $6::jsonb)`

// sqliteInsert stages in the embedded SQLite file: the id is made here,
// occurred_at is integer microseconds since the Unix epoch.
const sqliteInsert = `
INSERT INTO outbox (id, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

// Stage inserts n into herald.outbox inside the caller's pgx transaction
// and returns the message id. It never opens a connection of its own: the
// record commits or rolls back with the caller's business change.
func Stage(ctx context.Context, tx pgx.Tx, n Notification) (string, error) {
	return stagePostgres(n, func(sql string, args ...any) error {
		_, err := tx.Exec(ctx, sql, args...)
		return err
	})
}

// StageSQL inserts n inside the caller's database/sql transaction, in the
// SQL of dialect d, and returns the message id: into herald.outbox for
// Postgres (tx from github.com/jackc/pgx/v5/stdlib), into outbox for SQLite
// (the embedded SQLite file). DetectDialect finds d from the *sql.DB that
// began tx; the zero Dialect is an error wrapping ErrUnknownDialect. It
// never opens a connection of its own.
func StageSQL(ctx context.Context, tx *sql.Tx, d Dialect, n Notification) (string, error) {
	switch d {
	case Postgres:
		return stagePostgres(n, func(sql string, args ...any) error {
			// The JSON documents go as text: a driver other than pgx's
			// (lib/pq, say) sends []byte in binary format, which a jsonb
			// parameter would read as jsonb's binary form.
			for i, a := range args {
				if b, ok := a.([]byte); ok {
					args[i] = string(b)
				}
			}
			_, err := tx.ExecContext(ctx, sql, args...)
			return err
		})
	case SQLite:
		return stageSQLite(ctx, tx, n)
	}
	return "", fmt.Errorf("stage: %w: %v: pass stage.Postgres or stage.SQLite (DetectDialect reads it from the *sql.DB)", ErrUnknownDialect, d)
}

// stagePostgres inserts n with insert, which runs the statement sql with
// args in the caller's transaction, and returns the id it sent.
func stagePostgres(n Notification, insert func(sql string, args ...any) error) (string, error) {
	id, sql, args, err := pgArgs(n)
	if err != nil {
		return "", err
	}
	if err := insert(sql, args...); err != nil {
		return "", fmt.Errorf("stage: insert: %w", err)
	}
	return id, nil
}

// pgArgs validates n and returns its id (n's in canonical form, or a new
// one), the statement that stages it and the statement's arguments: with
// freshness, occurred_at and kind all empty, pgInsertDefaults, which
// leaves them to the columns' defaults; otherwise pgInsert, with NULL for
// the empty ones. The payload goes as the producer's bytes, not copied.
func pgArgs(n Notification) (string, string, []any, error) {
	if err := n.Validate(); err != nil {
		return "", "", nil, err
	}
	id, err := newOrParsed(n.ID)
	if err != nil {
		return "", "", nil, err
	}
	payload := []byte(n.Payload)
	if n.Freshness == nil && n.OccurredAt.IsZero() && n.Kind == "" {
		return id, pgInsertDefaults, []any{id, n.TenantID, n.Channel, n.Type, n.SchemaVersion, payload}, nil
	}
	var freshness, occurred any
	if n.Freshness != nil {
		freshness = []byte(n.Freshness)
	}
	if !n.OccurredAt.IsZero() {
		occurred = n.OccurredAt
	}
	return id, pgInsert, []any{id, n.TenantID, n.Channel, n.Type, n.SchemaVersion, payload,
		freshness, occurred, nullable(n.Kind)}, nil
}

func stageSQLite(ctx context.Context, tx *sql.Tx, n Notification) (string, error) {
	if err := n.Validate(); err != nil {
		return "", err
	}
	id, err := newOrParsed(n.ID)
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
		return "", fmt.Errorf("stage: insert: %w", err)
	}
	return id, nil
}

// NewID returns a new message id: a time-ordered (version 7) uuid, so
// records staged together sit side by side in the id index.
func NewID() (string, error) { return rules.NewID() }

// newOrParsed returns id in canonical form, or a new id when it is empty.
func newOrParsed(id string) (string, error) {
	if id == "" {
		return NewID()
	}
	return ParseID(id)
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
