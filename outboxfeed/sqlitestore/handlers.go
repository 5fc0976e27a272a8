package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/internal/storekit"
)

var _ outboxfeed.HandlerStore = (*Store)(nil)

// Handler is the name of the handler whose position this Store consumes.
func (s *Store) Handler() string { return s.handler }

// ForHandler returns the Store of handler name over the same connection
// (see outboxfeed.HandlerStore). Its Wakeups are this process's, as
// realtime's are.
func (s *Store) ForHandler(name string) outboxfeed.Store {
	return &Store{shared: s.shared, handler: name}
}

// sqliteRegisterPartition gives new handler ?1 its partition row, its
// position by its start point (?2). With one writer, the last seq
// allocated (the outbox's AUTOINCREMENT counter) divides the records
// committed before this transaction from those committed after; 0 is
// before every record still in the outbox.
const sqliteRegisterPartition = `INSERT INTO outbox_partition (handler, part, pos)
SELECT ?1, 0, CASE ?2 WHEN 'new' THEN coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'outbox'), 0) ELSE 0 END`

// RegisterHandler implements outboxfeed.HandlerStore. A new handler gets
// a partition row of its own, its position at 0 (StartRetained: every
// record still in the outbox is its) or at the last seq allocated
// (StartNew: only records committed after are its).
func (s *Store) RegisterHandler(ctx context.Context, spec outboxfeed.HandlerSpec) (bool, error) {
	return storekit.RegisterHandler(spec, s.log, func(spec outboxfeed.HandlerSpec) (created bool, err error) {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `INSERT INTO outbox_handler (name, type, start_from, created_at) VALUES (?1, ?2, ?3, ?4)
	ON CONFLICT (name) DO NOTHING`, spec.Name, spec.Type, string(spec.Start), time.Now().UnixMicro())
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			if created = n == 1; !created {
				return nil
			}
			_, err = tx.ExecContext(ctx, sqliteRegisterPartition, spec.Name, string(spec.Start))
			return err
		})
		return created, err
	})
}

// SetHandlerState implements outboxfeed.HandlerStore; it wakes this
// process's Workers, so a resumed handler claims at once (those of other
// processes find out by polling).
func (s *Store) SetHandlerState(ctx context.Context, name string, state outboxfeed.HandlerState, reason string) error {
	if !state.Valid() {
		return fmt.Errorf("%w: handler state %q", outboxfeed.ErrInvalidRequest, state)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE outbox_handler SET state = ?2, state_reason = nullif(?3, ''), state_at = ?4,
	failing_since = CASE WHEN ?2 = 'active' THEN NULL ELSE failing_since END
WHERE name = ?1`, name, string(state), reason, time.Now().UnixMicro())
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return fmt.Errorf("outboxfeed: set handler %s %s: %w", name, state, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", outboxfeed.ErrNoHandler, name)
	}
	s.wakeup.Broadcast()
	return nil
}

// DisableHandler implements outboxfeed.HandlerStore.
func (s *Store) DisableHandler(ctx context.Context, name, reason string, unchangedSince time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE outbox_handler SET state = 'disabled', state_reason = nullif(?2, ''), state_at = ?4
WHERE name = ?1 AND state = 'active' AND (state_at IS NULL OR state_at <= ?3)`, name, reason, unchangedSince.UnixMicro(), time.Now().UnixMicro())
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return false, fmt.Errorf("outboxfeed: disable handler %s: %w", name, err)
	}
	if n == 0 {
		var one int
		if err := s.db.QueryRowContext(ctx, `SELECT 1 FROM outbox_handler WHERE name = ?1`, name).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return false, fmt.Errorf("%w: %s", outboxfeed.ErrNoHandler, name)
		} else if err != nil {
			return false, fmt.Errorf("outboxfeed: disable handler %s: %w", name, err)
		}
		return false, nil
	}
	s.wakeup.Broadcast()
	return true, nil
}

// MarkFailing implements outboxfeed.HandlerStore.
func (s *Store) MarkFailing(ctx context.Context, name string, failing bool, lastErr string) (time.Time, error) {
	var since sql.NullInt64
	err := s.db.QueryRowContext(ctx, `UPDATE outbox_handler SET
	failing_since = CASE WHEN ?2 THEN coalesce(failing_since, ?4) END,
	last_error = CASE WHEN ?2 THEN substr(?3, 1, 1000) ELSE last_error END
WHERE name = ?1 RETURNING failing_since`, name, failing, lastErr, time.Now().UnixMicro()).Scan(&since)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, fmt.Errorf("%w: %s", outboxfeed.ErrNoHandler, name)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("outboxfeed: mark handler %s failing: %w", name, err)
	}
	return microsOrZero(since), nil
}

// Handlers implements outboxfeed.HandlerStore.
func (s *Store) Handlers(ctx context.Context) ([]outboxfeed.HandlerInfo, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT h.name, h.type, h.state, h.start_from, h.created_at, coalesce(h.state_reason, ''),
	h.state_at, h.failing_since, coalesce(h.last_error, ''),
	(SELECT count(*) FROM outbox_reader r WHERE r.handler = h.name AND r.seen_at > ?1)
FROM outbox_handler h ORDER BY h.name`, time.Now().Add(-time.Minute).UnixMicro())
	out, err := collectRows(rows, err, func(rows *sql.Rows, h *outboxfeed.HandlerInfo) error {
		var state, start string
		var created int64
		var stateAt, failing sql.NullInt64
		if err := rows.Scan(&h.Name, &h.Type, &state, &start, &created, &h.StateReason, &stateAt, &failing,
			&h.LastError, &h.Readers); err != nil {
			return err
		}
		h.State, h.Start = outboxfeed.HandlerState(state), outboxfeed.StartFrom(start)
		h.CreatedAt, h.StateAt, h.FailingSince = micros(created), microsOrZero(stateAt), microsOrZero(failing)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outboxfeed: handlers: %w", err)
	}
	return out, nil
}

// sqliteDropHandler deletes a handler's rows (?1), the handler's own row
// last; the records stay in the outbox for the others. Its replay audit
// stays, as PostgreSQL's does.
var sqliteDropHandler = []string{
	`DELETE FROM outbox_partition WHERE handler = ?1`,
	`DELETE FROM outbox_retry WHERE handler = ?1`,
	`DELETE FROM outbox_batch WHERE handler = ?1`,
	`DELETE FROM outbox_reader WHERE handler = ?1`,
	`DELETE FROM outbox_handler WHERE name = ?1`,
}

// DropHandler implements outboxfeed.HandlerStore: the handler's
// position, retry queue, dead letters and batch log go with it in one
// transaction.
func (s *Store) DropHandler(ctx context.Context, name string) error {
	if name == outboxfeed.RealtimeHandler {
		return fmt.Errorf("%w: the built-in handler %s cannot be dropped", outboxfeed.ErrInvalidRequest, name)
	}
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		for _, q := range sqliteDropHandler {
			res, err := tx.ExecContext(ctx, q, name)
			if err != nil {
				return err
			}
			if n, err = res.RowsAffected(); err != nil {
				return err
			}
		}
		if n == 0 {
			return fmt.Errorf("%w: %s", outboxfeed.ErrNoHandler, name)
		}
		return nil
	})
	if errors.Is(err, outboxfeed.ErrNoHandler) {
		return err
	}
	if err != nil {
		return fmt.Errorf("outboxfeed: drop handler %s: %w", name, err)
	}
	s.log.Info("outbox handler dropped", "handler", name)
	return nil
}

// microsOrZero is the time of v, zero when NULL.
func microsOrZero(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return micros(v.Int64)
}
