package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var _ outboxfeed.ReaderRegistry = (*Store)(nil)

// readerForgetAfter is how long a reader row unseen (a Worker killed
// without Stop) is kept for the operator before a heartbeat deletes it;
// it is ignored long before, after outboxfeed.ReaderLiveWithin.
const readerForgetAfter = "1 day"

// Heartbeat implements outboxfeed.ReaderRegistry: it upserts the Worker's
// row of herald.outbox_reader (started_at stays that of its first report)
// and deletes rows unseen for a day. ErrNoHandler if the store does not
// know handler.
func (s *Store) Heartbeat(ctx context.Context, handler, owner string, reads []outboxfeed.TypeVersion) error {
	readsJSON, err := storekit.ReadsJSON(reads)
	if err != nil {
		return err
	}
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO herald.outbox_reader (handler, owner, reads) VALUES ($1, $2, $3)
		ON CONFLICT (handler, owner) DO UPDATE SET reads = excluded.reads, seen_at = now()`, handler, owner, readsJSON)
	batch.Queue(`DELETE FROM herald.outbox_reader WHERE seen_at < now() - interval '` + readerForgetAfter + `'`)
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "23503" {
			return fmt.Errorf("%w: %s", outboxfeed.ErrNoHandler, handler)
		}
		return fmt.Errorf("outboxfeed: reader heartbeat of %s/%s: %w", handler, owner, err)
	}
	return nil
}

// ForgetReader implements outboxfeed.ReaderRegistry.
func (s *Store) ForgetReader(ctx context.Context, handler, owner string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM herald.outbox_reader WHERE handler = $1 AND owner = $2`, handler, owner); err != nil {
		return fmt.Errorf("outboxfeed: forget reader %s/%s: %w", handler, owner, err)
	}
	return nil
}

// Readers implements outboxfeed.ReaderRegistry: the rows seen within
// outboxfeed.ReaderLiveWithin.
func (s *Store) Readers(ctx context.Context) ([]outboxfeed.ReaderInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT handler, owner, reads, started_at, seen_at FROM herald.outbox_reader
		WHERE seen_at > now() - make_interval(secs => $1) ORDER BY handler, owner`, outboxfeed.ReaderLiveWithin.Seconds())
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: readers: %w", err)
	}
	var out []outboxfeed.ReaderInfo
	var r outboxfeed.ReaderInfo
	var reads []byte
	_, err = pgx.ForEachRow(rows, []any{&r.Handler, &r.Owner, &reads, &r.StartedAt, &r.SeenAt}, func() error {
		r.Reads = nil
		if err := json.Unmarshal(reads, &r.Reads); err != nil {
			return fmt.Errorf("reads of %s/%s: %w", r.Handler, r.Owner, err)
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: readers: %w", err)
	}
	return out, nil
}
