//go:build fixtures

package outboxfeed

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/testenv"
)

// TestGenerateFixtures writes the upgrade fixtures of testdata (see
// fixture_upgrade_test.go): go test -tags fixtures -run TestGenerateFixtures.
// They hold what a version of Herald wrote; regenerate them only to add
// the fixtures of a new version beside the old ones.
func TestGenerateFixtures(t *testing.T) {
	ctx := context.Background()
	gen := func(t *testing.T, s Store, stage func(ns ...Notification) []string) map[string][]string {
		ids := map[string][]string{}
		add := func(k string, v ...string) { ids[k] = append(ids[k], v...) }
		// dispatched: a Worker ran.
		rec := newRecorder()
		w := startWorker(t, s, rec, WorkerConfig{})
		d := stage(note("f/done", `{"n":1}`), note("f/done", `{"n":2}`))
		rec.waitFor(t, 10*time.Second, "done", func() bool { return rec.count() == 2 })
		for _, id := range d {
			eventually(t, 10*time.Second, "dispatched", func() bool { _, ok := stateOf(t, s, id).(Dispatched); return ok })
		}
		w.Stop()
		add("dispatched", d...)
		// dead letter, and a retry waiting, then records held behind it.
		dl := stage(note("f/dead", `{"n":1}`))
		rt := stage(note("f/retry", `{"n":1}`), note("f/retry", `{"n":2}`))
		b := claimAny(t, s, "gen", 100, time.Minute)
		var out []Outcome
		for _, r := range b.Records {
			switch r.ID {
			case dl[0]:
				out = append(out, Outcome{Kind: OutcomeDeadLettered, Err: "the target refused it"})
			case rt[0]:
				out = append(out, Outcome{Kind: OutcomeRetryLater, Err: "target busy", Delay: time.Hour})
			default:
				out = append(out, Outcome{Kind: OutcomeHold})
			}
		}
		if held, _, err := s.Complete(ctx, b, out, nil); err != nil || !held {
			t.Fatalf("complete: %v %v", held, err)
		}
		add("dead", dl...)
		add("retry", rt...)
		// a range stopped part way (PostgreSQL: the rest held in memory
		// was lost with the Worker).
		var ns []Notification
		for i := range 6 {
			ns = append(ns, note("f/mid", fmt.Sprintf(`{"n":%d}`, i)))
		}
		mid := stage(ns...)
		b = claimAny(t, s, "gen", 2, time.Minute)
		if b == nil || len(b.Records) != 2 || b.Records[0].Channel != "f/mid" {
			t.Fatalf("the claim of f/mid = %+v", b)
		}
		if held, _, err := s.Complete(ctx, b, make([]Outcome, len(b.Records)), nil); err != nil || !held {
			t.Fatalf("complete mid: %v %v", held, err)
		}
		add("mid-done", mid[:2]...)
		add("mid-rest", mid[2:]...)
		// an open claim whose holder died (its lease expires at once).
		open := stage(note("f/open", `{"n":1}`))
		claimAny(t, s, "dead-worker", 100, time.Millisecond)
		add("open", open...)
		// pending: never claimed.
		add("pending", stage(note("f/pending", `{"n":1}`), note("f/pending", `{"n":2}`))...)
		return ids
	}
	write := func(name string, ids map[string][]string) {
		b, err := json.MarshalIndent(ids, "", "  ")
		testenv.Must(t, err, "json")
		testenv.Must(t, os.WriteFile("testdata/"+name, append(b, '\n'), 0o644), "write ids")
	}

	// PostgreSQL, on a cluster of its own (low transaction ids).
	pg := testenv.StartPrivatePG(t)
	ps, err := OpenPG(ctx, Config{DatabaseURL: pg.URL()})
	testenv.Must(t, err, "open")
	defer ps.Close()
	testenv.Must(t, ps.Migrate(ctx), "migrate")
	ids := gen(t, ps, func(ns ...Notification) []string { return pgStage(t, ps, ns...) })
	write("pg-v6-ids.json", ids)
	if out, err := exec.Command(pg.Tool("pg_dump"), "--no-owner", "--no-privileges", "-n", "herald", "-f", "testdata/pg-v6.sql", pg.URL()).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}

	// SQLite.
	path := t.TempDir() + "/herald.db"
	ss, err := OpenSQLite(ctx, Config{DatabaseURL: path})
	testenv.Must(t, err, "open sqlite")
	testenv.Must(t, ss.Migrate(ctx), "migrate sqlite")
	ids = gen(t, ss, func(ns ...Notification) []string {
		var out []string
		for _, n := range ns {
			id, err := ss.StageOne(ctx, n)
			testenv.Must(t, err, "stage")
			out = append(out, id)
		}
		return out
	})
	write("sqlite-v4-ids.json", ids)
	_, err = ss.DB().ExecContext(ctx, `VACUUM INTO 'testdata/sqlite-v4.db'`)
	testenv.Must(t, err, "vacuum into")
	testenv.Must(t, ss.Close(), "close")
}
