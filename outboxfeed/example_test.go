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

// A Worker over an embedded store, with a publisher of the program's own:
// a record staged in a producer's transaction reaches it once committed.
func ExampleWorker() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "herald-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(dir, "herald.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

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
