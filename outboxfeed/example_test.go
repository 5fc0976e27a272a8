package outboxfeed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/sqlitestore"
	"github.com/heraldgw/herald/outboxfeed/stage"
)

// printer is a Publisher of the program's own: it takes each record the
// Worker claims (here it prints it) and says whether it was accepted. An
// error wrapped with outboxfeed.Retryable is retried with backoff, one
// wrapped with outboxfeed.Permanent is dead-lettered, any other is an
// outage of the target: the Worker holds the records and backs off.
type printer struct{ done chan struct{} }

func (p printer) Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error) {
	fmt.Printf("%s %s %s\n", msg.Key.Channel, msg.Type, msg.Data)
	close(p.done)
	return fanout.Publication{Message: msg}, nil
}

// openStore opens an embedded store (one SQLite file) in a new temporary
// directory and creates its schema, as `herald migrate` does; closeStore
// closes the store and removes the directory.
func openStore(ctx context.Context) (store *sqlitestore.Store, closeStore func()) {
	dir, err := os.MkdirTemp("", "herald-example")
	if err != nil {
		log.Fatal(err)
	}
	store, err = sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(dir, "herald.db")})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	return store, func() {
		store.Close()
		os.RemoveAll(dir)
	}
}

// A Worker over an embedded store, with a publisher of the program's own:
// a record staged in a producer's transaction reaches it once committed.
func ExampleWorker() {
	ctx := context.Background()
	store, closeStore := openStore(ctx)
	defer closeStore()

	p := printer{done: make(chan struct{})}
	w, err := outboxfeed.NewWorker(store, p, outboxfeed.WorkerConfig{PollInterval: 10 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()

	// The producer's business transaction.
	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := stage.StageSQL(ctx, tx, stage.SQLite, stage.Notification{
		TenantID: "acme", Channel: "orders/1", Type: "order.updated", SchemaVersion: 1,
		Payload: json.RawMessage(`{"status":"paid"}`),
	}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	store.Notify() // this process's Worker need not wait for its poll
	<-p.done
	// Output: orders/1 order.updated {"status":"paid"}
}

// A Go handler that dispatches journey-step commands, each in a new
// transaction of its own that also records the message id in a
// processed-ids table: a record delivered twice (at least once is the
// guarantee) changes the journey once.
func ExampleHandler_journeyStep() {
	ctx := context.Background()
	store, closeStore := openStore(ctx)
	defer closeStore()
	db := store.DB() // the application's own tables live beside the outbox
	for _, q := range []string{
		`CREATE TABLE journey (id TEXT PRIMARY KEY, step INTEGER NOT NULL)`,
		`CREATE TABLE processed_message (id TEXT PRIMARY KEY)`,
		`INSERT INTO journey VALUES ('j-1', 1)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			log.Fatal(err)
		}
	}

	// advance applies one command in a new transaction, once per message id.
	advance := func(ctx context.Context, r *outboxfeed.Record) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err // an outage: the record keeps its place
		}
		defer tx.Rollback()
		res, err := tx.ExecContext(ctx, `INSERT INTO processed_message (id) VALUES (?) ON CONFLICT DO NOTHING`, r.ID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			fmt.Println("a repeat: nothing changes")
			return nil
		}
		var cmd struct {
			Journey string `json:"journey"`
		}
		if err := json.Unmarshal(r.Payload, &cmd); err != nil {
			return outboxfeed.Permanent(err) // dead-lettered: no retry can fix it
		}
		if _, err := tx.ExecContext(ctx, `UPDATE journey SET step = step + 1 WHERE id = ?`, cmd.Journey); err != nil {
			return outboxfeed.Retryable(err)
		}
		return tx.Commit()
	}
	done := make(chan outboxfeed.Record, 1)
	handler := outboxfeed.HandlerFunc(func(ctx context.Context, recs []outboxfeed.Record) []error {
		errs := make([]error, len(recs))
		for i := range recs {
			if errs[i] = advance(ctx, &recs[i]); errs[i] != nil {
				break // the Worker holds the rest of the channel behind it
			}
			done <- recs[i]
		}
		return errs
	})

	if _, err := store.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: "journeys", Type: "go"}); err != nil {
		log.Fatal(err)
	}
	routes, err := outboxfeed.CompileRoutes([]outboxfeed.Route{{Kind: "journey_step_command"}})
	if err != nil {
		log.Fatal(err)
	}
	w, err := outboxfeed.NewHandlerWorker(store.ForHandler("journeys"), handler, outboxfeed.WorkerConfig{
		Handler: "journeys", Routes: routes, PollInterval: 10 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := stage.StageSQL(ctx, tx, stage.SQLite, stage.Notification{
		TenantID: "acme", Channel: "journeys/j-1", Type: "journey.advance", SchemaVersion: 1,
		Kind: stage.KindJourneyStepCommand, Payload: json.RawMessage(`{"journey":"j-1"}`),
	}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	store.Notify()
	rec := <-done
	// The same record delivered again (a crash before its completion was
	// recorded, or an operator's replay) changes nothing.
	if err := advance(ctx, &rec); err != nil {
		log.Fatal(err)
	}
	var step int
	if err := db.QueryRowContext(ctx, `SELECT step FROM journey WHERE id = 'j-1'`).Scan(&step); err != nil {
		log.Fatal(err)
	}
	fmt.Println("journey j-1 at step", step)
	// Output:
	// a repeat: nothing changes
	// journey j-1 at step 2
}
