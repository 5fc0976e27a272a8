package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed/outboxdb"
	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/jackc/pgx/v5"

	"github.com/heraldgw/herald/outboxfeed"
)

// herald runs one command in-process and returns its exit code and output.
func herald(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// mustHerald runs a command that must succeed.
func mustHerald(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := herald(t, args...)
	if code != 0 {
		t.Fatalf("herald %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// runFeedUntil runs `herald feed` in-process with the type registry given
// (JSON) until done reports true, then stops it.
func runFeedUntil(t *testing.T, dbURL, types string, what string, done func() bool) {
	t.Helper()
	p := startInProcess(append([]string{"feed", "--listen", "", "--types", writeCatalogue(t, types),
		"--outbox-poll-interval", "20ms", "--log-level", "error"}, storeArgs(dbURL)...))
	defer p.stop(t, 20*time.Second)
	p.waitUntil(t, 15*time.Second, what, done)
}

// replayRow is one herald.outbox_replay / outbox_replay row.
type replayRow struct {
	actor, reason, failure string
	at                     time.Time
}

// replayRows reads the audit rows of id with plain SQL.
func replayRows(t *testing.T, dbURL, id string) []replayRow {
	t.Helper()
	ctx := context.Background()
	var out []replayRow
	if strings.HasPrefix(dbURL, "postgres") {
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT actor, reason, failure, replayed_at FROM herald.outbox_replay WHERE message_id = $1 ORDER BY id`, id)
		if err != nil {
			t.Fatal(err)
		}
		var r replayRow
		if _, err := pgx.ForEachRow(rows, []any{&r.actor, &r.reason, &r.failure, &r.at}, func() error {
			out = append(out, r)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	db, err := sql.Open("sqlite", "file:"+dbURL+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT actor, reason, failure, replayed_at FROM outbox_replay WHERE message_id = ? ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var r replayRow
		var micros int64
		if err := rows.Scan(&r.actor, &r.reason, &r.failure, &micros); err != nil {
			t.Fatal(err)
		}
		r.at = time.UnixMicro(micros)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func stateName(t *testing.T, s outboxfeed.Store, id string) string {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return r.State.Name()
}

// TestOutboxCommands walks the operator's path on both stores: a rollback
// leaves records of a newer writer dead-lettered (no reader), the operator
// looks (stats, list), replays them by id, by type and by time range with
// an audit trail, the rolled-forward Worker dispatches them with the same
// id and payload, and old records are purged.
func TestOutboxCommands(t *testing.T) {
	for _, sc := range storeCases() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			dbURL, st, db := sc.migrated(t)
			store, err := outboxdb.Open(context.Background(), outboxdb.Config{DatabaseURL: dbURL})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()

			v2 := func(ch, data string, occurred time.Time) stage.Notification {
				n := notification("acme", ch, data) // order.updated v2
				n.OccurredAt = occurred
				return n
			}
			now := time.Now()
			byID := st.stage(t, v2("orders/1", `{"status":"paid","total":12.5}`, now), true)
			inRange := st.stage(t, v2("orders/2", `{"n":2}`, now.Add(-3*time.Hour)), true)
			outOfRange := st.stage(t, v2("orders/3", `{"n":3}`, now.Add(-30*time.Minute)), true)
			invoice := notification("acme", "invoices/1", `{"n":4}`)
			invoice.Type, invoice.SchemaVersion = "invoice.paid", 1
			byType := st.stage(t, invoice, true)
			readable := notification("acme", "orders/4", `{"n":5}`)
			readable.SchemaVersion = 1
			ok := st.stage(t, readable, true)
			dead := []string{byID, inRange, outOfRange, byType}

			// The rolled-back Worker reads order.updated v1 only.
			runFeedUntil(t, dbURL, `{"order.updated": {"versions": [1]}}`, "dead letters", func() bool {
				for _, id := range dead {
					if stateName(t, store, id) != outboxfeed.StateDeadLetter {
						return false
					}
				}
				return stateName(t, store, ok) == outboxfeed.StateDispatched
			})
			before, err := store.Get(context.Background(), byID)
			if err != nil {
				t.Fatal(err)
			}

			out := mustHerald(t, append([]string{"outbox", "stats"}, db...)...)
			for _, want := range []string{"dead_letter  4", "dispatched   1", "pending      0", "records per kind: notification=5", "order.updated  2        3", "invoice.paid   1        1"} {
				if !strings.Contains(out, want) {
					t.Errorf("stats output lacks %q:\n%s", want, out)
				}
			}
			var js struct {
				States      map[string]int64 `json:"states"`
				DeadLetters []struct {
					Type  string `json:"type"`
					Count int64  `json:"count"`
				} `json:"dead_letters"`
			}
			if err := json.Unmarshal([]byte(mustHerald(t, append([]string{"outbox", "stats", "--json"}, db...)...)), &js); err != nil {
				t.Fatal(err)
			}
			if js.States["dead_letter"] != 4 || len(js.DeadLetters) != 2 || js.DeadLetters[0].Type != "order.updated" || js.DeadLetters[0].Count != 3 {
				t.Fatalf("stats --json = %+v", js)
			}
			out = mustHerald(t, append([]string{"outbox", "list", "--state", "dead_letter", "--type", "order.updated", "--schema-version", "2"}, db...)...)
			if !strings.Contains(out, byID) || !strings.Contains(out, "no reader for order.updated v2") || strings.Contains(out, byType) || strings.Contains(out, ok) {
				t.Fatalf("list --state dead_letter --type order.updated:\n%s", out)
			}
			if lines := strings.Count(out, "\n"); lines != 4 {
				t.Fatalf("list printed %d lines, want a header and 3 records:\n%s", lines, out)
			}

			// --actor and --reason are required.
			for flag, args := range map[string][]string{
				"--actor":  {"outbox", "replay", "--id", byID, "--reason", "r"},
				"--reason": {"outbox", "replay", "--id", byID, "--actor", "alice"},
			} {
				code, _, errOut := herald(t, append(args, db...)...)
				if code != 2 || !strings.Contains(errOut, flag+" is required") {
					t.Errorf("replay without %s: exit %d, stderr %q; want 2 naming the flag", flag, code, errOut)
				}
			}
			if rows := replayRows(t, dbURL, byID); len(rows) != 0 {
				t.Fatalf("a refused replay wrote %v", rows)
			}

			// By id (the dispatched one is skipped, not an error).
			start := time.Now().Add(-time.Second)
			out = mustHerald(t, append([]string{"outbox", "replay", "--id", byID, "--id", ok, "--actor", "alice", "--reason", "reader for v2 deployed"}, db...)...)
			if !strings.Contains(out, "replayed 1 dead letter(s) to pending; skipped 1") || !strings.Contains(out, "skipped "+ok+": state dispatched") {
				t.Fatalf("replay by id:\n%s", out)
			}
			rows := replayRows(t, dbURL, byID)
			if len(rows) != 1 || rows[0].actor != "alice" || rows[0].reason != "reader for v2 deployed" ||
				rows[0].failure != "no reader for order.updated v2" || rows[0].at.Before(start) || rows[0].at.After(time.Now().Add(time.Second)) {
				t.Fatalf("audit rows of %s = %+v", byID, rows)
			}
			after, err := store.Get(context.Background(), byID)
			if err != nil {
				t.Fatal(err)
			}
			if p, isPending := after.State.(outboxfeed.Pending); !isPending || p.Attempt != 0 || p.LastError != "" ||
				after.ID != before.ID || !bytes.Equal(after.Payload, before.Payload) || after.Seq != before.Seq {
				t.Fatalf("replayed record:\nbefore %+v\nafter  %+v", before, after)
			}
			// By type.
			out = mustHerald(t, append([]string{"outbox", "replay", "--type", "invoice.paid", "--actor", "bob", "--reason", "INC-7"}, db...)...)
			if !strings.HasPrefix(out, "replayed 1 dead letter(s)") || stateName(t, store, byType) != outboxfeed.StatePending {
				t.Fatalf("replay by type:\n%s", out)
			}
			// By time range: occurred between 4h and 2h ago.
			out = mustHerald(t, append([]string{"outbox", "replay", "--since", "4h", "--until", now.Add(-2 * time.Hour).UTC().Format(time.RFC3339), "--actor", "bob", "--reason", "INC-8"}, db...)...)
			if !strings.HasPrefix(out, "replayed 1 dead letter(s)") || stateName(t, store, inRange) != outboxfeed.StatePending ||
				stateName(t, store, outOfRange) != outboxfeed.StateDeadLetter {
				t.Fatalf("replay by time range:\n%s", out)
			}
			if rows := replayRows(t, dbURL, inRange); len(rows) != 1 || rows[0].reason != "INC-8" || rows[0].failure != "no reader for order.updated v2" {
				t.Fatalf("audit rows of %s = %+v", inRange, rows)
			}

			// The rolled-forward Worker dispatches the replayed records.
			runFeedUntil(t, dbURL, `{"order.updated": {"versions": [1, 2]}, "invoice.paid": {"versions": [1]}}`, "replayed records dispatched", func() bool {
				for _, id := range []string{byID, inRange, byType} {
					if stateName(t, store, id) != outboxfeed.StateDispatched {
						return false
					}
				}
				return true
			})
			if got, err := store.Get(context.Background(), byID); err != nil || got.ID != byID || !bytes.Equal(got.Payload, before.Payload) {
				t.Fatalf("dispatched record = %+v, %v", got, err)
			}

			// Purge: the dead letter left, deliberately; then dispatched rows.
			out = mustHerald(t, append([]string{"outbox", "purge", "--state", "dead_letter", "--older-than", "0s", "--dry-run"}, db...)...)
			if !strings.Contains(out, "dry run: 1 dead_letter record(s)") || stateName(t, store, outOfRange) != outboxfeed.StateDeadLetter {
				t.Fatalf("purge dry run:\n%s", out)
			}
			out = mustHerald(t, append([]string{"outbox", "purge", "--state", "dead_letter", "--older-than", "0s"}, db...)...)
			if !strings.Contains(out, "deleted 1 dead_letter record(s)") {
				t.Fatalf("purge:\n%s", out)
			}
			out = mustHerald(t, append([]string{"outbox", "purge", "--state", "dispatched", "--older-than", "7d", "--dry-run"}, db...)...)
			if !strings.Contains(out, "dry run: 0 dispatched record(s) older than 7d") {
				t.Fatalf("purge dry run of young records:\n%s", out)
			}
			out = mustHerald(t, append([]string{"outbox", "purge", "--state", "dispatched", "--older-than", "0s", "--batch-size", "2"}, db...)...)
			// SQLite deletes rows; PostgreSQL deletes the retry-queue rows of
			// the three records that failed once and drops the whole segment
			// that holds the fourth.
			want := []string{"deleted 4 dispatched record(s)", "in 3 batch(es)"}
			if sc.name == "postgres" {
				want = []string{"deleted 3 dispatched record(s)", "in 2 batch(es)", "removed 1 whole segment(s)"}
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Fatalf("purge dispatched: no %q in\n%s", w, out)
				}
			}
			js.States = nil
			if err := json.Unmarshal([]byte(mustHerald(t, append([]string{"outbox", "stats", "--json"}, db...)...)), &js); err != nil {
				t.Fatal(err)
			}
			for state, n := range js.States {
				if n != 0 {
					t.Errorf("after purging, %d %s records remain", n, state)
				}
			}
			// The audit trail outlives the records.
			if rows := replayRows(t, dbURL, byID); len(rows) != 1 {
				t.Fatalf("audit rows after purge = %+v", rows)
			}
		})
	}
}

func TestOutboxUsageErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "none")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"outbox"}, 2, "want a subcommand"},
		{[]string{"outbox", "vacuum"}, 2, `unknown subcommand "vacuum"`},
		{[]string{"outbox", "replay", "--type", "order.updated"}, 2, "--actor is required"},
		{[]string{"outbox", "replay", "--actor", "a", "--reason", "r"}, 2, "with --id, --type, --since or --until"},
		{[]string{"outbox", "replay", "--actor", "a", "--reason", "r", "--since", "last tuesday"}, 2, `--since "last tuesday"`},
		{[]string{"outbox", "purge", "--older-than", "7d"}, 2, "--state is required"},
		{[]string{"outbox", "purge", "--state", "dispatched"}, 2, "--older-than is required"},
		{[]string{"outbox", "purge", "--state", "dispatched", "--older-than", "a week"}, 2, `--older-than "a week"`},
		{[]string{"outbox", "list", "--limit", "0"}, 2, "--limit 0"},
		{[]string{"outbox", "list", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"outbox", "stats", "--data-dir", missing}, 1, "the data directory " + missing + " does not exist"},
	}
	for _, c := range cases {
		code, _, errOut := herald(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("herald %s: exit %d, stderr %q; want exit %d mentioning %q", strings.Join(c.args, " "), code, errOut, c.code, c.want)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("outbox stats created an embedded store")
	}
	if code, _, errOut := herald(t, "outbox", "--help"); code != 0 || !strings.Contains(errOut, "replay") {
		t.Errorf("outbox --help: exit %d, %q", code, errOut)
	}
}

func TestParseWhenAndAge(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"2h":                   now.Add(-2 * time.Hour),
		"7d":                   now.Add(-7 * 24 * time.Hour),
		"1.5d":                 now.Add(-36 * time.Hour),
		"2025-05-30":           time.Date(2025, 5, 30, 0, 0, 0, 0, time.UTC),
		"2025-05-30T10:00:00Z": time.Date(2025, 5, 30, 10, 0, 0, 0, time.UTC),
	} {
		got, err := parseWhen("--since", in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseWhen(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"-2h", "-1d", "d", "soon"} {
		if _, err := parseWhen("--since", bad, now); err == nil {
			t.Errorf("parseWhen(%q) accepted", bad)
		}
	}
}

// TestOutboxPartitionsCommand lists the partitions and changes their
// number on PostgreSQL; the embedded store refuses any count but one.
func TestOutboxPartitionsCommand(t *testing.T) {
	for _, sc := range storeCases() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			_, _, db := sc.migrated(t)
			out := mustHerald(t, append([]string{"outbox", "partitions"}, db...)...)
			want := 4
			if sc.name != "postgres" {
				want = 1
			}
			if n := strings.Count(out, " active "); n != want {
				t.Fatalf("partitions: %d active, want %d:\n%s", n, want, out)
			}
			if sc.name != "postgres" {
				code, _, errOut := herald(t, append([]string{"outbox", "partitions", "--set", "4"}, db...)...)
				if code != 2 || !strings.Contains(errOut, "one partition") {
					t.Fatalf("partitions --set 4 on SQLite: exit %d, %s", code, errOut)
				}
				return
			}
			out = mustHerald(t, append([]string{"outbox", "partitions", "--set", "8"}, db...)...)
			if !strings.Contains(out, "partition count set to 8") || strings.Count(out, " retiring ") != 4 || strings.Count(out, " waiting ") != 8 {
				t.Fatalf("partitions --set 8:\n%s", out)
			}
			code, _, errOut := herald(t, append([]string{"outbox", "partitions", "--set", "2"}, db...)...)
			if code != 2 || !strings.Contains(errOut, "still in progress") {
				t.Fatalf("a second change: exit %d, %s", code, errOut)
			}
			var ps []outboxfeed.PartitionInfo
			if err := json.Unmarshal([]byte(mustHerald(t, append([]string{"outbox", "partitions", "--json"}, db...)...)), &ps); err != nil || len(ps) != 12 {
				t.Fatalf("partitions --json: %v %+v", err, ps)
			}
		})
	}
}

// TestOutboxResetAfterRestoreCommand: positions of this cluster are not
// reset (the command says there is nothing to do), and the embedded store
// has nothing to reset. The restore itself is tested in outboxfeed.
func TestOutboxResetAfterRestoreCommand(t *testing.T) {
	for _, sc := range storeCases() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			_, _, db := sc.migrated(t)
			code, _, errOut := herald(t, append([]string{"outbox", "reset-after-restore"}, db...)...)
			if code != 2 || !strings.Contains(errOut, "nothing to reset") {
				t.Fatalf("reset-after-restore on a store that was not restored: exit %d, %s", code, errOut)
			}
		})
	}
}
