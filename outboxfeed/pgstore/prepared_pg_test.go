package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/heraldgw/herald/outboxfeed/storetest"
	"github.com/jackc/pgx/v5"
)

// TestPostgresPreparedProducerWhileWakeupArmed: a producer that stages in
// a transaction it then prepares (two-phase commit: PREPARE TRANSACTION,
// later COMMIT PREPARED) must be able to prepare it whether or not an idle
// Worker armed the wake-up trigger. PostgreSQL refuses to prepare a
// transaction that sent a NOTIFY ("cannot PREPARE a transaction that has
// executed LISTEN, UNLISTEN, or NOTIFY"), and the trigger sends one for
// each staging statement while it is armed, which it is whenever a Worker
// is idle. (The model test, outboxfeed/internal/modeltest, counts such
// refusals; see its log line "prepared transactions refused (NOTIFY)".)
// Prepared transactions need max_prepared_transactions > 0: the test
// starts a server of its own.
func TestPostgresPreparedProducerWhileWakeupArmed(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPrivatePG(t, "max_prepared_transactions=10")
	url := pg.URL()
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: url})
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = s.Close() })
	testenv.Must(t, s.Migrate(ctx), "migrate")

	// An idle Worker's claim: it finds nothing and arms the trigger.
	b, err := s.Claim(ctx, outboxfeed.ClaimRequest{Owner: "idle", Partition: outboxfeed.AnyPartition, Limit: 10, Lease: time.Minute, Arm: time.Hour})
	testenv.Must(t, err, "claim")
	if b != nil {
		t.Fatalf("claim on an empty outbox returned %+v", b)
	}
	var armed bool
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT armed_until > now() FROM herald.outbox_wakeup`).Scan(&armed), "read the switch")
	if !armed {
		t.Fatal("the idle claim did not arm the wake-up trigger")
	}

	conn, err := pgx.Connect(ctx, url)
	testenv.Must(t, err, "producer connection")
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	testenv.Must(t, err, "begin")
	id, err := stage.Stage(ctx, tx, storetest.Note("orders/1", `{"status":"paid"}`))
	testenv.Must(t, err, "stage")
	if _, err := tx.Exec(ctx, "PREPARE TRANSACTION 'herald-prepared-producer'"); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatalf("a producer cannot prepare its transaction while the wake-up trigger is armed: %v", err)
	}
	_, err = conn.Exec(ctx, "COMMIT PREPARED 'herald-prepared-producer'")
	testenv.Must(t, err, "commit prepared")
	if _, ok := storetest.StateOf(t, s, id).(outboxfeed.Pending); !ok {
		t.Fatalf("the prepared producer's record is %#v, want pending", storetest.StateOf(t, s, id))
	}
}
