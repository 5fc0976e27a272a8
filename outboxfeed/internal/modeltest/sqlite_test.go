package modeltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/sqlitestore"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

// TestModelSQLite runs the model-based test (doc.go) on the
// embedded SQLite store: one partition, one writer at a time (so no
// producer holds its transaction open while others commit, and there is
// no partition-count change), no prepared transactions. Each Worker and
// each producer has a connection of its own to the file, as separate
// processes would.
func TestModelSQLite(t *testing.T) {
	t.Parallel()
	runModels(t, modelCaps{store: "sqlite"}, func(t *testing.T, plan *modelPlan) *modelBackend {
		return newModelSQLiteBackend(t)
	})
}

func newModelSQLiteBackend(t *testing.T) *modelBackend {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	open := func(t *testing.T) *sqlitestore.Store {
		s, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: path})
		testenv.Must(t, err, "open sqlite store")
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	b, admin := newModelBackend(t, open, func(admin *sqlitestore.Store) error {
		_, err := admin.DB().ExecContext(ctx, `CREATE TABLE model_business (id INTEGER PRIMARY KEY AUTOINCREMENT, producer INTEGER NOT NULL)`)
		return err
	})
	b.openConn = func(t *testing.T) modelConn {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_txlock=immediate")
		testenv.Must(t, err, "producer connection")
		db.SetMaxOpenConns(1)
		return &modelSQLiteConn{db: db}
	}
	b.raced = func(context.Context, []string) (string, error) { return "", nil }
	b.diagnose = func(ctx context.Context, ids []string) (map[string]modelDiag, error) {
		out := map[string]modelDiag{}
		for _, id := range ids {
			r, err := admin.Get(ctx, id)
			if errors.Is(err, outboxfeed.ErrNotFound) {
				continue
			}
			if err != nil {
				return out, err
			}
			d := modelDiag{state: r.State.Name(), partState: "active", attempt: r.Attempt}
			switch st := r.State.(type) {
			case outboxfeed.Pending:
				d.lastErr = st.LastError
			case outboxfeed.DeadLetter:
				d.lastErr = st.Reason
			}
			err = admin.DB().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM outbox_retry WHERE id = ?),
					(SELECT count(*) FROM outbox_retry WHERE tenant_id = ? AND channel = ? AND state = 'pending')`,
				id, r.TenantID, r.Channel).Scan(&d.queued, &d.chQueued)
			if err != nil {
				return out, err
			}
			out[id] = d
		}
		return out, nil
	}
	return b
}

// modelSQLiteConn is a SQLite producer's connection (BEGIN IMMEDIATE).
type modelSQLiteConn struct {
	db *sql.DB
	tx *sql.Tx
}

func (c *modelSQLiteConn) begin(ctx context.Context) (err error) {
	c.tx, err = c.db.BeginTx(ctx, nil)
	return err
}

func (c *modelSQLiteConn) business(ctx context.Context, producer int) error {
	_, err := c.tx.ExecContext(ctx, `INSERT INTO model_business (producer) VALUES (?)`, producer)
	return err
}

func (c *modelSQLiteConn) stage(ctx context.Context, n stage.Notification) (string, error) {
	return stage.StageSQL(ctx, c.tx, stage.SQLite, n)
}

func (c *modelSQLiteConn) exec(ctx context.Context, q string) error {
	_, err := c.tx.ExecContext(ctx, q)
	return err
}

func (c *modelSQLiteConn) commit(context.Context) error { return c.tx.Commit() }

func (c *modelSQLiteConn) rollback(context.Context) error { return c.tx.Rollback() }

func (c *modelSQLiteConn) prepare(context.Context, string) error {
	return fmt.Errorf("SQLite has no prepared transactions")
}

func (c *modelSQLiteConn) finishPrepared(context.Context, string, bool) error {
	return fmt.Errorf("SQLite has no prepared transactions")
}

func (c *modelSQLiteConn) close() { _ = c.db.Close() }
