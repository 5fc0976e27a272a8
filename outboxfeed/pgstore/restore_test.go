package pgstore

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/storetest"

	"github.com/heraldgw/herald/outboxfeed"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
)

// A logical restore (pg_dump | psql) into a new cluster keeps the
// positions, which are snapshots of the old cluster's transaction ids; the
// new cluster's are lower. The store must refuse to consume from them,
// and once reset deliver every record the old cluster had not delivered
// and every record staged since the restore, and no delivered one again.
func TestPostgresRestoreIntoAnotherCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, srcURL := newPGStore(t, Config{})
	rec := storetest.NewRecorder()
	w := storetest.StartWorker(t, src, rec, outboxfeed.WorkerConfig{})
	done := pgStage(t, src, storetest.Note("orders/1", `{"n":1}`), storetest.Note("orders/2", `{"n":2}`), storetest.Note("orders/1", `{"n":3}`))
	for _, id := range done {
		storetest.EventuallyIn[outboxfeed.Dispatched](t, 10*time.Second, "delivered before the dump", src, id)
	}
	w.Stop()
	waiting := pgStage(t, src, storetest.Note("orders/1", `{"n":4}`), storetest.Note("orders/3", `{"n":5}`))

	pg := testenv.StartPrivatePG(t)
	dump := filepath.Join(t.TempDir(), "dump.sql")
	if out, err := exec.CommandContext(ctx, pg.Tool("pg_dump"), "--no-owner", "--no-privileges", "-f", dump, srcURL).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	if out, err := exec.CommandContext(ctx, pg.Tool("psql"), "-q", "-v", "ON_ERROR_STOP=1", "-f", dump, pg.URL()).CombinedOutput(); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	_ = os.Remove(dump)

	s, err := Open(ctx, Config{URL: pg.URL()})
	testenv.Must(t, err, "open the restored store")
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); !errors.Is(err, ErrRestored) {
		t.Fatalf("Migrate on restored positions = %v, want ErrRestored", err)
	}
	// Producers go on staging in the new cluster meanwhile.
	staged := pgStage(t, s, storetest.Note("orders/1", `{"n":6}`))
	a, _ := outboxfeed.AdminOf(s)
	res, err := a.ResetAfterRestore(ctx)
	testenv.Must(t, err, "reset after restore")
	if res.Requeued != 3 {
		t.Fatalf("requeued %d records, want 3 (two waiting before the dump, one staged after)", res.Requeued)
	}
	testenv.Must(t, s.Migrate(ctx), "migrate after the reset")
	if _, err := a.ResetAfterRestore(ctx); !errors.Is(err, outboxfeed.ErrInvalidRequest) {
		t.Fatalf("a second reset = %v, want ErrInvalidRequest", err)
	}
	after := pgStage(t, s, storetest.Note("orders/1", `{"n":7}`))

	rec2 := storetest.NewRecorder()
	storetest.StartWorker(t, s, rec2, outboxfeed.WorkerConfig{})
	want := append(append(append([]string(nil), waiting...), staged...), after...)
	rec2.WaitFor(t, 30*time.Second, "every record not delivered before", func() bool { return rec2.Count() >= len(want) })
	storetest.ExactlyOnce(t, rec2, want)
	for _, id := range done {
		if _, ok := rec2.ByID(id); ok {
			t.Fatalf("record %s, delivered before the dump, was delivered again", id)
		}
	}
	if got := rec2.Channel(fanout.Key{Tenant: "acme", Channel: "orders/1"}); len(got) != 3 || got[0] != waiting[0] || got[1] != staged[0] || got[2] != after[0] {
		t.Fatalf("orders/1 after the restore = %v, want %v %v %v", got, waiting[0], staged[0], after[0])
	}
}
