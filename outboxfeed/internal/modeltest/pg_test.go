package modeltest

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed/pgstore"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/jackc/pgx/v5"
)

// TestModelPostgres runs the model-based test (doc.go) on
// PostgreSQL. The producers prepare transactions now and then, which
// needs max_prepared_transactions > 0: the shared test server has 0 and
// must not be restarted, so the run gets a PostgreSQL cluster of its own
// on loopback (testenv.StartPrivatePG), a fresh database per seed.
func TestModelPostgres(t *testing.T) {
	t.Parallel()
	pg := startModelPG(t)
	caps := modelCaps{store: "postgres", partitions: true, prepared: true, longOpen: true}
	runModels(t, caps, func(t *testing.T, plan *modelPlan) *modelBackend {
		return newModelPGBackend(t, pg.createDB(t), plan)
	})
}

func newModelPGBackend(t *testing.T, url string, plan *modelPlan) *modelBackend {
	ctx := context.Background()
	cfg := pgstore.Config{URL: url, DisableNotifyTrigger: !plan.notify, MaxConns: 4}
	open := func(t *testing.T) *pgstore.Store {
		s, err := pgstore.Open(ctx, cfg)
		testenv.Must(t, err, "open postgres store")
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	b, admin := newModelBackend(t, open, func(admin *pgstore.Store) error {
		_, err := admin.Pool().Exec(ctx, `CREATE TABLE model_business (id bigserial PRIMARY KEY, producer int NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp())`)
		return err
	})
	b.openConn = func(t *testing.T) modelConn {
		c, err := pgx.Connect(ctx, url)
		testenv.Must(t, err, "producer connection")
		return &modelPGConn{c: c}
	}
	b.raced = func(ctx context.Context, ids []string) (string, error) {
		var staged, old, risk int
		var barrier string
		err := admin.Pool().QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE p.state IN ('retiring', 'retired')),
				count(*) FILTER (WHERE p.state IN ('retiring', 'retired') AND o.xid >= r.retire_xmax), coalesce(min(r.retire_xmax::text), '')
			FROM herald.outbox o JOIN herald.outbox_partition p ON p.part = o.part CROSS JOIN herald.outbox_repartition r
			WHERE o.id = ANY($1::uuid[])`, ids).Scan(&staged, &old, &risk, &barrier)
		return fmt.Sprintf("%d staged, %d under the old mapping, %d of them at or above the barrier %s", staged, old, risk, barrier), err
	}
	b.diagnose = func(ctx context.Context, ids []string) (map[string]modelDiag, error) {
		rows, err := admin.Pool().Query(ctx, `SELECT r.id::text, r.state, r.part, coalesce(p.state, '?'), r.qseq IS NOT NULL,
				(SELECT count(*) FROM herald.outbox_retry q WHERE q.part = r.part AND q.tenant_id = r.tenant_id
					AND q.channel = r.channel AND q.state = 'pending'),
				r.attempt, coalesce(r.last_error, '')
			FROM herald.outbox_records r LEFT JOIN herald.outbox_partition p ON p.part = r.part
			WHERE r.id = ANY($1::uuid[])`, ids)
		if err != nil {
			return nil, err
		}
		out := map[string]modelDiag{}
		var id string
		var d modelDiag
		_, err = pgx.ForEachRow(rows, []any{&id, &d.state, &d.part, &d.partState, &d.queued, &d.chQueued, &d.attempt, &d.lastErr}, func() error {
			out[id] = d
			return nil
		})
		return out, err
	}
	return b
}

// modelPGConn is a PostgreSQL producer's connection.
type modelPGConn struct {
	c  *pgx.Conn
	tx pgx.Tx
}

func (c *modelPGConn) begin(ctx context.Context) (err error) {
	c.tx, err = c.c.Begin(ctx)
	return err
}

func (c *modelPGConn) business(ctx context.Context, producer int) error {
	_, err := c.tx.Exec(ctx, `INSERT INTO model_business (producer) VALUES ($1)`, producer)
	return err
}

func (c *modelPGConn) stage(ctx context.Context, n stage.Notification) (string, error) {
	return stage.Stage(ctx, c.tx, n)
}

func (c *modelPGConn) exec(ctx context.Context, sql string) error {
	_, err := c.tx.Exec(ctx, sql)
	return err
}

func (c *modelPGConn) commit(ctx context.Context) error { return c.tx.Commit(ctx) }

func (c *modelPGConn) rollback(ctx context.Context) error { return c.tx.Rollback(ctx) }

func (c *modelPGConn) prepare(ctx context.Context, gid string) error {
	if _, err := c.tx.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'"); err != nil {
		_ = c.tx.Rollback(ctx)
		return err
	}
	// The session has left the transaction; the prepared one lives on
	// by its gid.
	c.tx = nil
	return nil
}

func (c *modelPGConn) finishPrepared(ctx context.Context, gid string, commit bool) error {
	verb := "ROLLBACK"
	if commit {
		verb = "COMMIT"
	}
	_, err := c.c.Exec(ctx, verb+" PREPARED '"+gid+"'")
	return err
}

func (c *modelPGConn) raceRisk(ctx context.Context, id string) (part int, risk bool, err error) {
	// No barrier yet (NULL): the change still waits for transactions open
	// when it committed, this one among them.
	err = c.tx.QueryRow(ctx, `SELECT o.part, coalesce(p.state = 'retiring' AND o.xid >= r.retire_xmax, false)
		FROM herald.outbox o JOIN herald.outbox_partition p ON p.part = o.part CROSS JOIN herald.outbox_repartition r
		WHERE o.id = $1::uuid`, id).Scan(&part, &risk)
	return part, risk, err
}

func (c *modelPGConn) close() { _ = c.c.Close(context.Background()) }

// modelPG is the run's PostgreSQL cluster (testenv.StartPrivatePG): fsync
// off, commits asynchronous, prepared transactions allowed, room for the
// connections of every Worker, producer and racer.
type modelPG struct {
	*testenv.PrivatePG
	dbs atomic.Int64
}

func startModelPG(t *testing.T) *modelPG {
	t.Helper()
	return &modelPG{PrivatePG: testenv.StartPrivatePG(t,
		"synchronous_commit=off", "max_prepared_transactions=64", "max_connections=300")}
}

// createDB creates a database for t (dropped when t ends, after rolling
// back any transaction it left prepared) and returns its URL.
func (pg *modelPG) createDB(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	base := pg.URL()
	name := fmt.Sprintf("model_%d", pg.dbs.Add(1))
	conn, err := pgx.Connect(ctx, base)
	testenv.Must(t, err, "connect to the private PostgreSQL")
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	testenv.Must(t, err, "create database")
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		rows, err := c.Query(ctx, `SELECT gid FROM pg_prepared_xacts WHERE database = $1`, name)
		if err == nil {
			gids, _ := pgx.CollectRows(rows, pgx.RowTo[string])
			if len(gids) > 0 {
				t.Errorf("model: %d transactions left prepared: %v", len(gids), gids)
			}
			for _, gid := range gids {
				_, _ = c.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'")
			}
		}
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	testenv.Must(t, err, "parse the private PostgreSQL's URL")
	u.Path = "/" + name
	return u.String()
}
