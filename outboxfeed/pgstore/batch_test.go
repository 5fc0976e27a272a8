package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/storetest"

	"github.com/heraldgw/herald/outboxfeed"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
)

func TestPostgresBatchSmoke(t *testing.T) {
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	var ids []string
	for i := range 50 {
		id, err := stageOne(ctx, s, storetest.Note(fmt.Sprintf("c/%d", i%7), `{"n":1}`))
		testenv.Must(t, err, "stage")
		ids = append(ids, id)
	}
	rec := storetest.NewRecorder()
	storetest.StartWorker(t, s, rec, outboxfeed.WorkerConfig{BatchSize: 8})
	rec.WaitFor(t, 10*time.Second, "all records", func() bool { return rec.Count() >= 50 })
	for _, id := range ids {
		storetest.Eventually(t, 5*time.Second, "dispatched", func() bool {
			_, ok := storetest.StateOf(t, s, id).(outboxfeed.Dispatched)
			return ok
		})
	}
	for i := range 7 {
		got := rec.Channel(fanout.Key{Tenant: "acme", Channel: fmt.Sprintf("c/%d", i)})
		if len(got) != len(dedupe(got)) {
			t.Fatalf("channel %d has duplicates: %v", i, got)
		}
	}
	st, err := s.Stats(ctx)
	testenv.Must(t, err, "stats")
	if st.Pending != 0 {
		t.Fatalf("pending = %d", st.Pending)
	}
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
