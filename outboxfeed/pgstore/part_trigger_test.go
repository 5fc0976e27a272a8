package pgstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed"
)

// TestPostgresUpgradePartitionSetByTrigger takes a database at migration
// 15, with records staged under a first partition count and, a change of
// the count in progress, under a second, to 16: every record keeps its
// partition, and the insert trigger gives records staged one at a time,
// several in one INSERT and by COPY the partition
// herald.outbox_partition_of gives them, each transaction sending one
// wake-up while the switch is armed and none while it is disarmed or
// herald.notify is off. A Worker delivers every record once, in order per
// channel, and completes the change. The way back is refused while the
// change is in progress and while records of the first count are
// retained; once they are gone it goes back (part generated again, the
// statement-level wake-up trigger again, every value the same), and
// forth again.
func TestPostgresUpgradePartitionSetByTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, url := newPGStoreAt(t, 15)
	a, _ := outboxfeed.AdminOf(s)
	listener := listenForWakeups(t, url)

	staged := stagedRecords{}
	stageSome := func(round int) { t.Helper(); staged.stage(t, s, 8, round) }
	parts := func(what string) map[string]int {
		t.Helper()
		rows, err := s.Pool().Query(ctx, `SELECT id::text, part FROM herald.outbox_all`)
		testenv.Must(t, err, what)
		m := map[string]int{}
		var id string
		var part int
		_, err = pgx.ForEachRow(rows, []any{&id, &part}, func() error { m[id] = part; return nil })
		testenv.Must(t, err, what)
		return m
	}
	generated := func() string {
		t.Helper()
		var g string
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT string_agg(c.relname || ':' || (a.attgenerated <> ''), ',' ORDER BY c.relname)
			FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
			WHERE a.attrelid IN ('herald.outbox'::regclass, 'herald.outbox_archive'::regclass) AND a.attname = 'part'`).Scan(&g), "part generated")
		return g
	}
	misplaced := func() int {
		t.Helper()
		var n int
		testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM herald.outbox_all
			WHERE part <> herald.outbox_partition_of(tenant_id, channel)`).Scan(&n), "misplaced")
		return n
	}
	exec := func(what, sql string, args ...any) {
		t.Helper()
		_, err := s.Pool().Exec(ctx, sql, args...)
		testenv.Must(t, err, what)
	}
	marker := 0
	// wakeups runs stageIn in a transaction and counts the wake-ups its
	// commit sent: a marker NOTIFY sent after it comes after them.
	wakeups := func(what string, stageIn func(tx pgx.Tx) error) int {
		t.Helper()
		testenv.Must(t, pgx.BeginFunc(ctx, s.Pool(), stageIn), what)
		marker++
		m := fmt.Sprint("marker ", marker)
		exec("send the marker", `SELECT pg_notify($1, $2)`, pgNotifyChannel, m)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for n := 0; ; {
			got, err := listener.WaitForNotification(wctx)
			testenv.Must(t, err, "wait for notifications "+what)
			switch got.Payload {
			case m:
				return n
			case "":
				n++
			default:
				t.Fatalf("%s: got %q, want a wake-up or the marker", what, got.Payload)
			}
		}
	}

	stageSome(0)
	testenv.Must(t, a.SetPartitions(ctx, 6), "set partitions")
	stageSome(1)
	if misplaced() == 0 {
		t.Fatal("the change of the partition count moved no channel")
	}
	before := parts("partitions at 15")

	testenv.Must(t, s.Migrate(ctx), "migrate to the latest")
	if g := generated(); g != "outbox:false,outbox_archive:false" {
		t.Fatalf("part generated at 16: %s", g)
	}
	if got := parts("partitions at 16"); !maps.Equal(got, before) {
		t.Fatalf("records changed partition at 16: %v, were %v", got, before)
	}
	if !hasNotifyTrigger(t, s) {
		t.Fatal("no wake-up trigger at 16")
	}

	// One at a time, several in one INSERT, by COPY; armed, disarmed,
	// herald.notify off.
	several := func(round int) func(tx pgx.Tx) error {
		return func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload)
				SELECT 'acme', 'c/' || g, 'order.updated', 1, jsonb_build_object('several', $1::int) FROM generate_series(0, 7) g`, round)
			return err
		}
	}
	copied := func(round int) func(tx pgx.Tx) error {
		return func(tx pgx.Tx) error {
			var rows [][]any
			for c := range 8 {
				rows = append(rows, []any{"acme", fmt.Sprintf("c/%d", c), "order.updated", 1, fmt.Sprintf(`{"copied":%d}`, round)})
			}
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"herald", "outbox"},
				[]string{"tenant_id", "channel", "type", "schema_version", "payload"}, pgx.CopyFromRows(rows))
			return err
		}
	}
	quiet := func(f func(tx pgx.Tx) error) func(tx pgx.Tx) error {
		return func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL herald.notify = off`); err != nil {
				return err
			}
			return f(tx)
		}
	}
	exec("arm", pgArm, time.Hour.Microseconds())
	for i, c := range []struct {
		what  string
		stage func(tx pgx.Tx) error
		want  int
	}{
		{"armed, one INSERT of 8 rows", several(2), 1},
		{"armed, COPY of 8 rows", copied(3), 1},
		{"armed, two INSERTs", func(tx pgx.Tx) error {
			if err := several(4)(tx); err != nil {
				return err
			}
			return copied(5)(tx)
		}, 1},
		{"armed, herald.notify off", quiet(several(6)), 0},
		{"disarmed, one INSERT of 8 rows", several(7), 0},
	} {
		if i == 4 {
			exec("disarm", pgDisarm)
		}
		if got := wakeups(c.what, c.stage); got != c.want {
			t.Fatalf("%s: %d wake-ups, want %d", c.what, got, c.want)
		}
	}
	rows, err := s.Pool().Query(ctx, `SELECT id::text, channel FROM herald.outbox WHERE payload ?| '{several,copied}' ORDER BY seq`)
	testenv.Must(t, err, "read the records staged by SQL")
	var id, channel string
	_, err = pgx.ForEachRow(rows, []any{&id, &channel}, func() error {
		k := fanout.Key{Tenant: "acme", Channel: channel}
		staged[k] = append(staged[k], id)
		return nil
	})
	testenv.Must(t, err, "read the records staged by SQL")
	if n := len(staged[fanout.Key{Tenant: "acme", Channel: "c/0"}]); n != 2+6 {
		t.Fatalf("%d records on c/0 before the last round, want %d", n, 2+6)
	}
	stageSome(8)
	if n := misplaced(); n != 8 {
		t.Fatalf("%d records outside the partition herald.outbox_partition_of gives, want the 8 staged under the first count", n)
	}
	// part follows an update, and no insert sets it by hand.
	var moved, was int
	testenv.Must(t, s.Pool().QueryRow(ctx, `WITH r AS (INSERT INTO herald.outbox (tenant_id, channel, type, schema_version, payload, part)
		VALUES ('acme', 'gone/1', 'order.updated', 1, '{}', -1) RETURNING id, part)
		SELECT r.part FROM r`).Scan(&was), "insert with a part")
	testenv.Must(t, s.Pool().QueryRow(ctx, `UPDATE herald.outbox SET channel = 'gone/2', part = -1 WHERE channel = 'gone/1'
		RETURNING part - herald.outbox_partition_of(tenant_id, channel)`).Scan(&moved), "update the channel")
	if was < 0 || moved != 0 {
		t.Fatalf("part set by hand: inserted as %d, off by %d after an update", was, moved)
	}
	exec("delete the updated record", `DELETE FROM herald.outbox WHERE channel = 'gone/2'`)

	refused := func(what, want string) {
		t.Helper()
		err := s.MigrateTo(ctx, 15)
		if !errors.Is(err, outboxfeed.ErrRollbackRefused) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: rollback = %v, want refused saying %q", what, err, want)
		}
		if v, err := s.SchemaVersion(ctx); err != nil || v != len(pgMigrations) {
			t.Fatalf("%s: after the refusal: version %d, %v", what, v, err)
		}
	}
	refused("during the change", "a change of the partition count is in progress")

	rec, w := deliverStagedAndRepartition(t, s, staged)
	w.Stop()
	staged.deliveredOnce(t, rec)

	refused("with records of the first count retained", "8 retained records")
	// Retention drops them (here by hand: they are done).
	exec("drop the records of the first count", `DELETE FROM herald.outbox WHERE part <> herald.outbox_partition_of(tenant_id, channel)`)
	before = parts("partitions at 16, before going back")
	testenv.Must(t, s.MigrateTo(ctx, 15), "go back to 15")
	if g := generated(); g != "outbox:true,outbox_archive:true" {
		t.Fatalf("part generated back at 15: %s", g)
	}
	if got := parts("partitions back at 15"); !maps.Equal(got, before) {
		t.Fatalf("records changed partition back at 15: %v, were %v", got, before)
	}
	var def string
	testenv.Must(t, s.Pool().QueryRow(ctx, `SELECT pg_get_triggerdef(oid) FROM pg_trigger
		WHERE tgrelid = 'herald.outbox'::regclass AND tgname = 'outbox_notify'`).Scan(&def), "the wake-up trigger back at 15")
	if !strings.Contains(def, "FOR EACH STATEMENT WHEN") {
		t.Fatalf("the wake-up trigger back at 15: %s", def)
	}
	exec("arm back at 15", pgArm, time.Hour.Microseconds())
	if got := wakeups("back at 15, armed", several(9)); got != 1 {
		t.Fatalf("back at 15: %d wake-ups, want 1", got)
	}
	testenv.Must(t, s.Migrate(ctx), "migrate to the latest again")
	if got := wakeups("at 16 again, armed", copied(10)); got != 1 {
		t.Fatalf("at 16 again: %d wake-ups, want 1", got)
	}
	if n := misplaced(); n != 0 {
		t.Fatalf("%d records outside their partition at 16 again", n)
	}

	// Where the wake-up is left out, the insert trigger only sets part.
	off, err := Open(ctx, Config{URL: url, DisableNotifyTrigger: true})
	testenv.Must(t, err, "open without the wake-up")
	t.Cleanup(func() { _ = off.Close() })
	testenv.Must(t, off.Migrate(ctx), "migrate without the wake-up")
	if hasNotifyTrigger(t, s) {
		t.Fatal("the wake-up trigger stayed")
	}
	if got := wakeups("left out, armed", several(11)); got != 0 {
		t.Fatalf("left out: %d wake-ups, want none", got)
	}
	if n := misplaced(); n != 0 {
		t.Fatalf("%d records outside their partition with the wake-up left out", n)
	}
	testenv.Must(t, s.Migrate(ctx), "install the wake-up again")
	if got := wakeups("installed again, armed", several(12)); got != 1 {
		t.Fatalf("installed again: %d wake-ups, want 1", got)
	}
}
