package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"

	"github.com/jackc/pgx/v5"
)

var _ outboxfeed.HandlerStore = (*Store)(nil)

// Handler is the name of the handler whose positions this Store consumes.
func (s *Store) Handler() string { return s.handler }

// ForHandler returns the Store of handler name over the same pool (see
// outboxfeed.HandlerStore). Its Wakeups listen on a connection of their
// own.
func (s *Store) ForHandler(name string) outboxfeed.Store {
	return &Store{shared: s.shared, handler: name}
}

// RegisterHandler implements outboxfeed.HandlerStore. A new handler gets
// a row per partition of the built-in handler's, in the same state:
//
//   - StartNew: positioned at this transaction's snapshot, so a record is
//     its when its transaction was not visible then.
//   - StartRetained: positioned before every record (the snapshot 1:1:),
//     so every record still in herald.outbox is its. Partitions retired
//     by a change of the partition count become retiring again (they
//     still hold records), and the active ones wait behind them, so each
//     channel keeps its order across the change.
func (s *Store) RegisterHandler(ctx context.Context, spec outboxfeed.HandlerSpec) (bool, error) {
	return storekit.RegisterHandler(spec, s.log, func(spec outboxfeed.HandlerSpec) (created bool, err error) {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			// Claims and changes of the partition count wait for this.
			if _, err := tx.Exec(ctx, `LOCK TABLE herald.outbox_partition IN EXCLUSIVE MODE`); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `INSERT INTO herald.outbox_handler (name, type, start_from) VALUES ($1, $2, $3)
				ON CONFLICT (name) DO NOTHING`, spec.Name, spec.Type, string(spec.Start))
			if err != nil {
				return err
			}
			if created = tag.RowsAffected() == 1; !created {
				return nil
			}
			q := `INSERT INTO herald.outbox_partition (handler, part, lo, state)
				SELECT $1, p.part, pg_current_snapshot(), p.state FROM herald.outbox_partition p WHERE p.handler = 'realtime'`
			if spec.Start == outboxfeed.StartRetained {
				q = `INSERT INTO herald.outbox_partition (handler, part, lo, state)
				SELECT $1, p.part, '1:1:'::pg_snapshot, CASE
					WHEN p.state IN ('retired', 'retiring') THEN 'retiring'
					WHEN p.state = 'active' AND EXISTS (SELECT 1 FROM herald.outbox_partition o
						WHERE o.handler = 'realtime' AND o.state IN ('retired', 'retiring')) THEN 'waiting'
					ELSE p.state END
				FROM herald.outbox_partition p WHERE p.handler = 'realtime'`
			}
			_, err = tx.Exec(ctx, q, spec.Name)
			return err
		})
		return created, err
	})
}

// SetHandlerState implements outboxfeed.HandlerStore; it wakes every
// process's Workers, so a resumed handler claims at once.
func (s *Store) SetHandlerState(ctx context.Context, name string, state outboxfeed.HandlerState, reason string) error {
	if !state.Valid() {
		return fmt.Errorf("%w: handler state %q", outboxfeed.ErrInvalidRequest, state)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE herald.outbox_handler SET state = $2, state_reason = nullif($3, ''), state_at = now(),
			failing_since = CASE WHEN $2 = 'active' THEN NULL ELSE failing_since END
			WHERE name = $1`, name, string(state), reason)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: %s", outboxfeed.ErrNoHandler, name)
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, pgNotifyChannel)
		return err
	})
	if err != nil {
		if errors.Is(err, outboxfeed.ErrNoHandler) {
			return err
		}
		return fmt.Errorf("outboxfeed: set handler %s %s: %w", name, state, err)
	}
	s.wakeup.Broadcast()
	return nil
}

// DisableHandler implements outboxfeed.HandlerStore.
func (s *Store) DisableHandler(ctx context.Context, name, reason string, unchangedSince time.Time) (bool, error) {
	var disabled bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var state string
		err := tx.QueryRow(ctx, `SELECT state FROM herald.outbox_handler WHERE name = $1 FOR UPDATE`, name).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s", outboxfeed.ErrNoHandler, name)
		}
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE herald.outbox_handler SET state = 'disabled', state_reason = nullif($2, ''), state_at = now()
			WHERE name = $1 AND state = 'active' AND (state_at IS NULL OR state_at <= $3)`, name, reason, unchangedSince)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		disabled = true
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, pgNotifyChannel)
		return err
	})
	if err != nil {
		if errors.Is(err, outboxfeed.ErrNoHandler) {
			return false, err
		}
		return false, fmt.Errorf("outboxfeed: disable handler %s: %w", name, err)
	}
	if disabled {
		s.wakeup.Broadcast()
	}
	return disabled, nil
}

// MarkFailing implements outboxfeed.HandlerStore.
func (s *Store) MarkFailing(ctx context.Context, name string, failing bool, lastErr string) (time.Time, error) {
	var since *time.Time
	err := s.pool.QueryRow(ctx, `UPDATE herald.outbox_handler SET
		failing_since = CASE WHEN $2 THEN coalesce(failing_since, now()) END,
		last_error = CASE WHEN $2 THEN left($3, 1000) ELSE last_error END
		WHERE name = $1 RETURNING failing_since`, name, failing, lastErr).Scan(&since)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, fmt.Errorf("%w: %s", outboxfeed.ErrNoHandler, name)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("outboxfeed: mark handler %s failing: %w", name, err)
	}
	return deref(since), nil
}

// Handlers implements outboxfeed.HandlerStore.
func (s *Store) Handlers(ctx context.Context) ([]outboxfeed.HandlerInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT h.name, h.type, h.state, h.start_from, h.created_at, coalesce(h.state_reason, ''),
		h.state_at, h.failing_since, coalesce(h.last_error, ''),
		(SELECT count(*) FROM herald.outbox_reader r WHERE r.handler = h.name AND r.seen_at > now() - interval '1 minute')::int
		FROM herald.outbox_handler h ORDER BY h.name`)
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: handlers: %w", err)
	}
	var out []outboxfeed.HandlerInfo
	var h outboxfeed.HandlerInfo
	var state, start string
	var stateAt, failing *time.Time
	_, err = pgx.ForEachRow(rows, []any{&h.Name, &h.Type, &state, &start, &h.CreatedAt, &h.StateReason, &stateAt, &failing,
		&h.LastError, &h.Readers}, func() error {
		h.State, h.Start = outboxfeed.HandlerState(state), outboxfeed.StartFrom(start)
		h.StateAt, h.FailingSince = deref(stateAt), deref(failing)
		out = append(out, h)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: handlers: %w", err)
	}
	return out, nil
}

// DropHandler implements outboxfeed.HandlerStore: the handler's rows go
// with it (ON DELETE CASCADE); the records stay in herald.outbox for the
// others, and retention removes them.
func (s *Store) DropHandler(ctx context.Context, name string) error {
	if name == outboxfeed.RealtimeHandler {
		return fmt.Errorf("%w: the built-in handler %s cannot be dropped", outboxfeed.ErrInvalidRequest, name)
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM herald.outbox_handler WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("outboxfeed: drop handler %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", outboxfeed.ErrNoHandler, name)
	}
	s.log.Info("outbox handler dropped", "handler", name)
	return nil
}
