package cfoutbox

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// These tests need neither PostgreSQL nor the Centrifugo binary.

func TestCreateStatements(t *testing.T) {
	o := Outbox{Table: "connbench_cf_ab12", Notify: "connbench_cf_ab12"}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(o.CreateStatements(), "\n")
	for _, want := range []string{
		"DROP TABLE IF EXISTS connbench_cf_ab12",
		"id bigserial PRIMARY KEY",
		"method text",
		"payload bytea",
		"partition int",
		"ON connbench_cf_ab12 (partition, id)",
		"FUNCTION connbench_cf_ab12_notify_partition_change()",
		"pg_notify('connbench_cf_ab12', NEW.partition::text)",
		"AFTER INSERT ON connbench_cf_ab12",
		"FOR EACH ROW",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("create statements lack %q:\n%s", want, all)
		}
	}
	polling := strings.Join(Outbox{Table: DocTable}.CreateStatements(), "\n")
	if strings.Contains(polling, "TRIGGER") || strings.Contains(polling, "pg_notify") {
		t.Errorf("without Notify: a trigger:\n%s", polling)
	}
	drop := strings.Join(o.DropStatements(), "\n")
	if !strings.Contains(drop, "DROP TABLE IF EXISTS connbench_cf_ab12") || !strings.Contains(drop, "DROP FUNCTION IF EXISTS connbench_cf_ab12_notify_partition_change()") {
		t.Errorf("drop statements:\n%s", drop)
	}
	if got, want := o.InsertSQL(), `INSERT INTO connbench_cf_ab12 (method, payload, partition) VALUES ('publish', $1, $2)`; got != want {
		t.Errorf("InsertSQL = %s, want %s", got, want)
	}
}

func TestValidate(t *testing.T) {
	for _, o := range []Outbox{
		{Table: ""}, {Table: "Outbox"}, {Table: "outbox; DROP TABLE x"}, {Table: "1outbox"},
		{Table: strings.Repeat("a", 41)}, {Table: "outbox", Notify: "bad-name"},
	} {
		if o.Validate() == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if err := (Outbox{Table: DocTable, Notify: DocNotifyChannel}).Validate(); err != nil {
		t.Error(err)
	}
}

// recorder is an Execer that records statements and fails on demand.
type recorder struct {
	stmts  []string
	failAt int
}

func (r *recorder) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	r.stmts = append(r.stmts, sql)
	if len(r.stmts) == r.failAt {
		return pgconn.CommandTag{}, errors.New("boom")
	}
	return pgconn.CommandTag{}, nil
}

func TestCreateAndDropRunTheStatements(t *testing.T) {
	o := Outbox{Table: "t1", Notify: "n1"}
	var r recorder
	if err := o.Create(context.Background(), &r); err != nil || len(r.stmts) != len(o.CreateStatements()) {
		t.Fatalf("Create: %v, %d statements", err, len(r.stmts))
	}
	r = recorder{failAt: 2}
	if err := o.Create(context.Background(), &r); err == nil || !strings.Contains(err.Error(), "create outbox table t1: boom") || len(r.stmts) != 2 {
		t.Fatalf("Create stopping at a failure: %v after %d statements", err, len(r.stmts))
	}
	r = recorder{}
	if err := (Outbox{Table: "Bad"}).Drop(context.Background(), &r); err == nil || len(r.stmts) != 0 {
		t.Fatalf("Drop of an invalid name: %v, %d statements run", err, len(r.stmts))
	}
}

func TestConsumerConfig(t *testing.T) {
	c := Consumer{Name: "outbox", DSN: "postgres://x/y", Outbox: Outbox{Table: "t", Notify: "n"},
		Partitions: BestPartitions, Batch: BestBatch, PollInterval: DefaultPoll}
	b, err := json.Marshal(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	// The key names Centrifugo v6.9.1 reads, spelled out here once more.
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"name": "outbox", "enabled": true, "type": "postgresql", "postgresql": map[string]any{
		"dsn": "postgres://x/y", "outbox_table_name": "t", "num_partitions": 4.0, "partition_select_limit": 1000.0,
		"partition_poll_interval": "300ms", "partition_notification_channel": "n",
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("consumer: %s", b)
	}
	c.Outbox.Notify = ""
	if b, _ := json.Marshal(c.Config()); strings.Contains(string(b), "partition_notification_channel") {
		t.Fatalf("without a trigger: %s", b)
	}
	// Centrifugo parses durations with time.ParseDuration.
	if d, err := time.ParseDuration(Consumer{PollInterval: 1500 * time.Microsecond}.Config().PostgreSQL.PartitionPollInterval); err != nil || d != 1500*time.Microsecond {
		t.Fatalf("poll interval: %v %v", d, err)
	}
}

func TestAppendPublish(t *testing.T) {
	got := string(AppendPublish([]byte("x"), "bench:ab-c7", []byte(`{"t":1,"k":7}`)))
	if want := `x{"channel":"bench:ab-c7","data":{"t":1,"k":7}}`; got != want {
		t.Fatalf("AppendPublish = %s, want %s", got, want)
	}
	var v struct {
		Channel string          `json:"channel"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(AppendPublish(nil, `a"b`, []byte(`{}`)), &v); err != nil || v.Channel != `a"b` || string(v.Data) != `{}` {
		t.Fatalf("quoting: %+v %v", v, err)
	}
}
