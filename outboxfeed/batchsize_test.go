package outboxfeed_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/sqlitestore"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/heraldgw/herald/outboxfeed/storetest"
)

// The realtime handler's Worker (NewWorker) takes a backlog in batches of
// DefaultBatchSize; a Go handler's (NewHandlerWorker) in batches of
// DefaultHandlerBatchSize, each Handle call a channel's records of one
// batch. The embedded store (SQLite, one partition) serves both.
func TestDefaultBatchSizes(t *testing.T) {
	const records = 2500 // more than a handler's batch, fewer than realtime's
	ctx := context.Background()
	store, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "herald.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: "journeys", Type: "go"}); err != nil {
		t.Fatal(err)
	}
	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range records {
		if _, err := stage.StageSQL(ctx, tx, stage.SQLite, stage.Notification{
			TenantID: "acme", Channel: "orders/1", Type: "order.updated", SchemaVersion: 1, Payload: json.RawMessage(`{"a":1}`),
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	rec := storetest.NewRecorder()
	rt := storetest.StartWorker(t, store, rec, outboxfeed.WorkerConfig{PollInterval: 10 * time.Millisecond})
	rec.WaitFor(t, time.Minute, "every record published", func() bool { return rec.Count() == records })
	if got := rt.Claims(outboxfeed.ClaimBatch); got != 1 {
		t.Errorf("the realtime Worker took %d records in %v claims, want one (a batch of %d)", records, got, outboxfeed.DefaultBatchSize)
	}

	var (
		mu      sync.Mutex
		handled int
		largest int
	)
	done := make(chan struct{})
	h := outboxfeed.HandlerFunc(func(_ context.Context, recs []outboxfeed.Record) []error {
		mu.Lock()
		defer mu.Unlock()
		handled += len(recs)
		largest = max(largest, len(recs))
		if handled == records {
			close(done)
		}
		return make([]error, len(recs))
	})
	hw := storetest.StartHandlerWorker(t, store.ForHandler("journeys"), h, outboxfeed.WorkerConfig{
		Handler: "journeys", PollInterval: 10 * time.Millisecond,
	})
	<-done
	mu.Lock()
	defer mu.Unlock()
	if largest != outboxfeed.DefaultHandlerBatchSize {
		t.Errorf("the Go handler got up to %d records of the channel at once, want a batch of %d", largest, outboxfeed.DefaultHandlerBatchSize)
	}
	if got, want := hw.Claims(outboxfeed.ClaimBatch), float64((records+outboxfeed.DefaultHandlerBatchSize-1)/outboxfeed.DefaultHandlerBatchSize); got != want {
		t.Errorf("the Go handler's Worker took %d records in %v claims, want %v", records, got, want)
	}
}
