package outboxfeed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
)

// The fixtures in testdata hold an outbox written by Herald before its
// stores became packages of their own, with records in every state:
// dispatched, dead-lettered, waiting for a retry (and one held behind
// it), a range stopped part way, a claim whose holder died, and never
// claimed. *-ids.json names them. gen_fixture_test.go wrote them, with
// the code of that time: go test -tags fixtures -run TestGenerateFixtures. Opened by the current code and migrated in place, every record
// not yet delivered is delivered once, in order, and no other.
func checkFixture(t *testing.T, s Store, idsFile string, makeDue func()) {
	t.Helper()
	ctx := context.Background()
	b, err := os.ReadFile(idsFile)
	testenv.Must(t, err, "read ids")
	var ids map[string][]string
	testenv.Must(t, json.Unmarshal(b, &ids), "parse ids")
	testenv.Must(t, s.Migrate(ctx), "migrate in place")
	makeDue() // the retry was due an hour after the fixture was made
	rec := newRecorder()
	startWorker(t, s, rec, WorkerConfig{LeaseDuration: time.Second})
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
	rec.waitFor(t, time.Minute, "every record not yet delivered", func() bool { return rec.count() >= total })
	for ch, v := range want {
		if got := rec.channel(fanout.Key{Tenant: "acme", Channel: ch}); fmt.Sprint(got) != fmt.Sprint(v) {
			t.Fatalf("%s delivered %v, want %v (each once, in order)", ch, got, v)
		}
	}
	if n := rec.count(); n != total {
		t.Fatalf("%d deliveries, want %d", n, total)
	}
	for _, id := range append(append([]string(nil), ids["dispatched"]...), ids["mid-done"]...) {
		if _, ok := stateOf(t, s, id).(Dispatched); !ok {
			t.Fatalf("%s, dispatched in the fixture: %#v", id, stateOf(t, s, id))
		}
	}
	if _, ok := stateOf(t, s, ids["dead"][0]).(DeadLetter); !ok {
		t.Fatalf("the dead letter: %#v", stateOf(t, s, ids["dead"][0]))
	}
}

func TestPostgresFixtureUpgradesInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	if out, err := exec.CommandContext(ctx, testenv.PGTool(t, "psql"), "-q", "-v", "ON_ERROR_STOP=1",
		"-f", "testdata/pg-v6.sql", url).CombinedOutput(); err != nil {
		t.Fatalf("load the fixture: %v\n%s", err, out)
	}
	s, err := OpenPG(ctx, Config{DatabaseURL: url})
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = s.Close() })
	// The fixture's transaction ids come from a fresh cluster: this one
	// must have counted past them (a long-lived one has).
	for {
		var behind bool
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT max(pg_snapshot_xmax(lo)) >= pg_snapshot_xmax(pg_current_snapshot())
			FROM herald.outbox_partition`).Scan(&behind), "compare xids")
		if !behind {
			break
		}
		_, err := s.Pool().Exec(ctx, `SELECT pg_current_xact_id()`)
		testenv.Must(t, err, "take an xid")
	}
	checkFixture(t, s, "testdata/pg-v6-ids.json", func() {
		_, err := s.Pool().Exec(ctx, `UPDATE herald.outbox_retry SET next_attempt_at = now() WHERE state = 'pending'`)
		testenv.Must(t, err, "make the retry due")
	})
}

func TestSQLiteFixtureUpgradesInPlace(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "herald.db")
	src, err := os.Open("testdata/sqlite-v4.db")
	testenv.Must(t, err, "open fixture")
	dst, err := os.Create(path)
	testenv.Must(t, err, "create copy")
	_, err = io.Copy(dst, src)
	testenv.Must(t, err, "copy fixture")
	testenv.Must(t, errors.Join(src.Close(), dst.Close()), "close copies")
	s, err := OpenSQLite(context.Background(), Config{DatabaseURL: path})
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = s.Close() })
	checkFixture(t, s, "testdata/sqlite-v4-ids.json", func() {
		_, err := s.DB().Exec(`UPDATE outbox_retry SET next_attempt_at = 0 WHERE state = 'pending'`)
		testenv.Must(t, err, "make the retry due")
	})
}
