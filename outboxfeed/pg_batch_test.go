package outboxfeed

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
)

func TestPostgresBatchSmoke(t *testing.T) {
	s, _ := newPGStore(t, Config{})
	ctx := context.Background()
	var ids []string
	for i := range 50 {
		id, err := s.StageOne(ctx, note(fmt.Sprintf("c/%d", i%7), `{"n":1}`))
		testenv.Must(t, err, "stage")
		ids = append(ids, id)
	}
	rec := newRecorder()
	startWorker(t, s, rec, WorkerConfig{BatchSize: 8})
	rec.waitFor(t, 10*time.Second, "all records", func() bool { return rec.count() >= 50 })
	for _, id := range ids {
		eventually(t, 5*time.Second, "dispatched", func() bool {
			_, ok := stateOf(t, s, id).(Dispatched)
			return ok
		})
	}
	for i := range 7 {
		got := rec.channel(fanout.Key{Tenant: "acme", Channel: fmt.Sprintf("c/%d", i)})
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
