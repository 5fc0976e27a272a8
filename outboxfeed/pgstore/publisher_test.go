package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/storetest"

	"github.com/heraldgw/herald/outboxfeed"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/redisbroker"
	"github.com/heraldgw/herald/internal/testenv"
)

// The in-memory and Redis brokers are Publishers as they are.
var (
	_ outboxfeed.Publisher = (*fanout.MemoryBroker)(nil)
	_ outboxfeed.Publisher = (*redisbroker.Broker)(nil)
	_ outboxfeed.Publisher = fanout.Broker(nil)
)

func TestWorkerPublishesToMemoryBroker(t *testing.T) {
	t.Parallel()
	s, _ := newPGStore(t, Config{})
	b, err := fanout.NewMemoryBroker(fanout.MemoryConfig{})
	testenv.Must(t, err, "memory broker")
	defer b.Stop()
	storetest.StartWorker(t, s, b, outboxfeed.WorkerConfig{})
	ctx := context.Background()
	var ids []string
	for i := range 2 {
		id, err := stageOne(ctx, s, storetest.Note("orders/1", fmt.Sprintf(`{"i":%d}`, i)))
		testenv.Must(t, err, "stage")
		ids = append(ids, id)
	}
	for _, id := range ids {
		storetest.Eventually(t, 5*time.Second, "dispatched", func() bool {
			_, ok := storetest.StateOf(t, s, id).(outboxfeed.Dispatched)
			return ok
		})
	}
	r, err := b.Recover(ctx, fanout.Key{Tenant: "acme", Channel: "orders/1"}, fanout.Position{}, 0)
	testenv.Must(t, err, "recover")
	if r.Top.Offset != 2 {
		t.Fatalf("broker top offset = %d, want 2", r.Top.Offset)
	}
}
