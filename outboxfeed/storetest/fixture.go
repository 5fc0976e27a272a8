package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
)

// CheckFixture opens a fixture of an older Herald. The fixtures in each
// store's testdata hold an outbox written by Herald before its stores
// became packages of their own, with records in every state: dispatched,
// dead-lettered, waiting for a retry (and one held behind it), a range
// stopped part way, a claim whose holder died, and never claimed
// (PostgreSQL's fixture holds the rows, loaded into the schema the
// migrations of that version build). *-ids.json names them. The generator
// that wrote them, with the code of that time, is in the commit that added
// them (git log -- '*/testdata/*-ids.json'; go test -tags fixtures -run
// TestGenerateFixtures there). Opened by the current code and migrated in
// place, every record not yet delivered is delivered once, in order, and
// no other.
func CheckFixture(t *testing.T, s outboxfeed.Store, idsFile string, makeDue func()) {
	t.Helper()
	ctx := context.Background()
	b, err := os.ReadFile(idsFile)
	testenv.Must(t, err, "read ids")
	var ids map[string][]string
	testenv.Must(t, json.Unmarshal(b, &ids), "parse ids")
	testenv.Must(t, s.Migrate(ctx), "migrate in place")
	makeDue() // the retry was due an hour after the fixture was made
	rec := NewRecorder()
	StartWorker(t, s, rec, outboxfeed.WorkerConfig{LeaseDuration: time.Second})
	want := map[string][]string{
		"f/retry":   ids["retry"],
		"f/mid":     ids["mid-rest"],
		"f/open":    ids["open"],
		"f/pending": ids["pending"],
	}
	total := 0
	for _, v := range want {
		total += len(v)
	}
	rec.WaitFor(t, time.Minute, "every record not yet delivered", func() bool { return rec.Count() >= total })
	for ch, v := range want {
		if got := rec.Channel(fanout.Key{Tenant: "acme", Channel: ch}); fmt.Sprint(got) != fmt.Sprint(v) {
			t.Fatalf("%s delivered %v, want %v (each once, in order)", ch, got, v)
		}
	}
	if n := rec.Count(); n != total {
		t.Fatalf("%d deliveries, want %d", n, total)
	}
	for _, id := range append(append([]string(nil), ids["dispatched"]...), ids["mid-done"]...) {
		if _, ok := StateOf(t, s, id).(outboxfeed.Dispatched); !ok {
			t.Fatalf("%s, dispatched in the fixture: %#v", id, StateOf(t, s, id))
		}
	}
	if _, ok := StateOf(t, s, ids["dead"][0]).(outboxfeed.DeadLetter); !ok {
		t.Fatalf("the dead letter: %#v", StateOf(t, s, ids["dead"][0]))
	}
}
