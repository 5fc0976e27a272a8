package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/heraldgw/herald/outboxfeed/storetest"
)

// A producer that commits in two phases (PREPARE TRANSACTION, later
// COMMIT PREPARED) cannot prepare a transaction that sent a NOTIFY, and
// the wake-up trigger sends one while an idle Worker has armed it. With
// herald.notify off in its transaction, as docs/integrate.md says, it
// prepares whether the trigger is armed or not, and its record is found
// by polling. Prepared transactions need max_prepared_transactions > 0:
// the test runs on a PostgreSQL of its own.
func TestPostgresPreparedProducerWithNotifyOff(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPrivatePG(t, "max_prepared_transactions=10")
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: pg.URL()})
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = s.Close() })
	testenv.Must(t, s.Migrate(ctx), "migrate")

	// An idle Worker's claim: it finds nothing and arms the trigger.
	b, err := s.Claim(ctx, outboxfeed.ClaimRequest{Owner: "idle", Partition: outboxfeed.AnyPartition, Limit: 10, Lease: time.Minute, Arm: time.Hour})
	testenv.Must(t, err, "claim")
	if b != nil {
		t.Fatalf("claim on an empty outbox returned %+v", b)
	}
	prepare := func(gid string, notifyOff bool) (string, error) {
		conn, err := pgx.Connect(ctx, pg.URL())
		testenv.Must(t, err, "producer connection")
		defer conn.Close(ctx)
		tx, err := conn.Begin(ctx)
		testenv.Must(t, err, "begin")
		defer func() { _ = tx.Rollback(ctx) }()
		if notifyOff {
			_, err = tx.Exec(ctx, `SET LOCAL herald.notify = off`)
			testenv.Must(t, err, "set herald.notify")
		}
		id, err := stage.Stage(ctx, tx, storetest.Note("orders/1", `{"status":"paid"}`))
		testenv.Must(t, err, "stage")
		if _, err := tx.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'"); err != nil {
			return "", err
		}
		_, err = conn.Exec(ctx, "COMMIT PREPARED '"+gid+"'")
		return id, err
	}
	// Without the setting, PostgreSQL refuses (what the setting is for).
	if _, err := prepare("herald-no-setting", false); err == nil {
		t.Fatal("a transaction that sent a NOTIFY was prepared: the setting is not needed")
	}
	id, err := prepare("herald-notify-off", true)
	testenv.Must(t, err, "prepare and commit with herald.notify off")
	rec := storetest.NewRecorder()
	storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{PollInterval: 20 * time.Millisecond})
	rec.WaitFor(t, 30*time.Second, "the prepared producer's record", func() bool { _, ok := rec.ByID(id); return ok })
}
