package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"
)

var _ outboxfeed.ReaderRegistry = (*Store)(nil)

// readerForgetAfter is how long a reader row nobody refreshed is kept (a
// Worker killed without ForgetReader): the next heartbeat deletes it.
const readerForgetAfter = 24 * time.Hour

// Heartbeat implements outboxfeed.ReaderRegistry: an upsert that keeps the
// row's started_at; ErrNoHandler for a handler the store does not know.
func (s *Store) Heartbeat(ctx context.Context, handler, owner string, reads []outboxfeed.TypeVersion) error {
	readsJSON, err := storekit.ReadsJSON(reads)
	if err != nil {
		return err
	}
	now := time.Now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outboxfeed: reader heartbeat of %s/%s: %w", handler, owner, err)
	}
	defer func() { _ = tx.Rollback() }()
	var one int
	switch err := tx.QueryRowContext(ctx, `SELECT 1 FROM outbox_handler WHERE name = ?1`, handler).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: %s", outboxfeed.ErrNoHandler, handler)
	case err != nil:
		return fmt.Errorf("outboxfeed: reader heartbeat of %s/%s: %w", handler, owner, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO outbox_reader (handler, owner, reads, started_at, seen_at) VALUES (?1, ?2, ?3, ?4, ?4)
		ON CONFLICT (handler, owner) DO UPDATE SET reads = excluded.reads, seen_at = excluded.seen_at`,
		handler, owner, readsJSON, now.UnixMicro()); err != nil {
		return fmt.Errorf("outboxfeed: reader heartbeat of %s/%s: %w", handler, owner, err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM outbox_reader WHERE seen_at < ?1`, now.Add(-readerForgetAfter).UnixMicro()); err != nil {
		return fmt.Errorf("outboxfeed: reader heartbeat: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outboxfeed: reader heartbeat of %s/%s: %w", handler, owner, err)
	}
	return nil
}

// ForgetReader implements outboxfeed.ReaderRegistry.
func (s *Store) ForgetReader(ctx context.Context, handler, owner string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM outbox_reader WHERE handler = ?1 AND owner = ?2`, handler, owner); err != nil {
		return fmt.Errorf("outboxfeed: forget reader %s/%s: %w", handler, owner, err)
	}
	return nil
}

// Readers implements outboxfeed.ReaderRegistry: the rows seen within
// outboxfeed.ReaderLiveWithin.
func (s *Store) Readers(ctx context.Context) ([]outboxfeed.ReaderInfo, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT handler, owner, reads, started_at, seen_at FROM outbox_reader
		WHERE seen_at > ?1 ORDER BY handler, owner`, time.Now().Add(-outboxfeed.ReaderLiveWithin).UnixMicro())
	out, err := collectRows(rows, err, func(rows *sql.Rows, r *outboxfeed.ReaderInfo) error {
		var reads string
		var started, seen int64
		if err := rows.Scan(&r.Handler, &r.Owner, &reads, &started, &seen); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(reads), &r.Reads); err != nil {
			return fmt.Errorf("reads of %s/%s: %w", r.Handler, r.Owner, err)
		}
		r.StartedAt, r.SeenAt = time.UnixMicro(started).UTC(), time.UnixMicro(seen).UTC()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: readers: %w", err)
	}
	return out, nil
}
