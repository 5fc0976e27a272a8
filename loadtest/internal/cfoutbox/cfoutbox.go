// Package cfoutbox is Centrifugo v6.9.1's PostgreSQL outbox as the load
// tests set it up (cfbench, connbench): its documented table, the per-row
// pg_notify trigger its docs give for LISTEN/NOTIFY, the consumer's entry
// in Centrifugo's config, and the publish command a producer inserts.
// Nothing of Centrifugo's code is used: only its documented contract.
package cfoutbox

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The names in Centrifugo's docs.
const (
	DocTable         = "outbox"
	DocNotifyChannel = "centrifugo_partition_change"
)

// The consumer shape that drained fastest in cfbench and that the latency
// comparisons use: batches of up to 1,000 rows over 4 partitions, woken by
// LISTEN/NOTIFY with Centrifugo's default 300 ms poll behind it.
const (
	BestBatch      = 1000
	BestPartitions = 4
	DefaultPoll    = 300 * time.Millisecond
	MaxPartitions  = 256
)

// Outbox is one outbox table and, when Notify is set, its trigger.
type Outbox struct {
	// Table is the table's name, used unquoted: lower-case letters,
	// digits and underscores.
	Table string
	// Notify is the LISTEN/NOTIFY channel the per-row trigger notifies
	// with the row's partition; "" installs no trigger (polling only).
	Notify string
}

var identOK = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// Validate checks that the names can be used unquoted in SQL (and leave
// room for the trigger's suffixes within PostgreSQL's 63 bytes).
func (o Outbox) Validate() error {
	if !identOK.MatchString(o.Table) {
		return fmt.Errorf("cfoutbox: table %q: want [a-z_][a-z0-9_]*, at most 40 bytes", o.Table)
	}
	if o.Notify != "" && !identOK.MatchString(o.Notify) {
		return fmt.Errorf("cfoutbox: notify channel %q: want [a-z_][a-z0-9_]*, at most 40 bytes", o.Notify)
	}
	return nil
}

// function and trigger name the table's notify function and trigger (the
// function's body names the channel, so each table has its own).
func (o Outbox) function() string { return o.Table + "_notify_partition_change" }
func (o Outbox) trigger() string  { return o.Table + "_notify_partition_trigger" }

// CreateStatements drop and create the table as Centrifugo documents it,
// `(id bigserial PRIMARY KEY, method text, payload bytea, partition int)`,
// with an index on (partition, id) for the consumer's
// `WHERE partition=$1 ORDER BY id LIMIT $2`, and with Notify the
// documented AFTER INSERT FOR EACH ROW trigger calling
// pg_notify(Notify, partition).
func (o Outbox) CreateStatements() []string {
	stmts := []string{
		`DROP TABLE IF EXISTS ` + o.Table,
		`CREATE TABLE ` + o.Table + ` (
			id bigserial PRIMARY KEY,
			method text,
			payload bytea,
			partition int
		)`,
		`CREATE INDEX ` + o.Table + `_partition_id_idx ON ` + o.Table + ` (partition, id)`,
	}
	if o.Notify != "" {
		stmts = append(stmts,
			`CREATE OR REPLACE FUNCTION `+o.function()+`()
			RETURNS TRIGGER AS $$
			BEGIN
				PERFORM pg_notify('`+o.Notify+`', NEW.partition::text);
				RETURN NEW;
			END;
			$$ LANGUAGE plpgsql`,
			`CREATE OR REPLACE TRIGGER `+o.trigger()+`
			AFTER INSERT ON `+o.Table+`
			FOR EACH ROW
			EXECUTE FUNCTION `+o.function()+`()`)
	}
	return stmts
}

// DropStatements drop the table (its trigger with it) and the function.
func (o Outbox) DropStatements() []string {
	return []string{
		`DROP TABLE IF EXISTS ` + o.Table,
		`DROP FUNCTION IF EXISTS ` + o.function() + `()`,
	}
}

// InsertSQL inserts one publish command: $1 its payload (bytea), $2 its
// partition.
func (o Outbox) InsertSQL() string {
	return `INSERT INTO ` + o.Table + ` (method, payload, partition) VALUES ('publish', $1, $2)`
}

// Execer runs a statement: a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Create runs CreateStatements.
func (o Outbox) Create(ctx context.Context, db Execer) error {
	return o.exec(ctx, db, "create", o.CreateStatements())
}

// Drop runs DropStatements.
func (o Outbox) Drop(ctx context.Context, db Execer) error {
	return o.exec(ctx, db, "drop", o.DropStatements())
}

func (o Outbox) exec(ctx context.Context, db Execer, what string, stmts []string) error {
	if err := o.Validate(); err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := db.Exec(ctx, s); err != nil {
			return fmt.Errorf("cfoutbox: %s outbox table %s: %w", what, o.Table, err)
		}
	}
	return nil
}

// Consumer is Centrifugo's postgresql consumer of one outbox.
type Consumer struct {
	// Name is the consumer's name ([a-zA-Z0-9_]{2,}). Centrifugo's
	// partition advisory locks are named after it, per database.
	Name         string
	DSN          string
	Outbox       Outbox
	Partitions   int // num_partitions
	Batch        int // partition_select_limit
	PollInterval time.Duration
}

// ConsumerConfig is one entry of the "consumers" list of Centrifugo v6's
// JSON config, for a postgresql consumer. Key names are v6.9.1's
// (internal/configtypes: ConsumerConfig, PostgresConsumerConfig).
type ConsumerConfig struct {
	Name       string           `json:"name"`
	Enabled    bool             `json:"enabled"`
	Type       string           `json:"type"`
	PostgreSQL PostgreSQLConfig `json:"postgresql"`
}

// PostgreSQLConfig is the consumer's "postgresql" object.
type PostgreSQLConfig struct {
	DSN                   string `json:"dsn"`
	OutboxTableName       string `json:"outbox_table_name"`
	NumPartitions         int    `json:"num_partitions"`
	PartitionSelectLimit  int    `json:"partition_select_limit"`
	PartitionPollInterval string `json:"partition_poll_interval"`
	// PartitionNotificationChannel is set only when the outbox has a
	// trigger: Centrifugo then LISTENs on it.
	PartitionNotificationChannel string `json:"partition_notification_channel,omitempty"`
}

// Config is the consumer's entry in Centrifugo's config.
func (c Consumer) Config() ConsumerConfig {
	return ConsumerConfig{Name: c.Name, Enabled: true, Type: "postgresql", PostgreSQL: PostgreSQLConfig{
		DSN:                          c.DSN,
		OutboxTableName:              c.Outbox.Table,
		NumPartitions:                c.Partitions,
		PartitionSelectLimit:         c.Batch,
		PartitionPollInterval:        c.PollInterval.String(),
		PartitionNotificationChannel: c.Outbox.Notify,
	}}
}

// AppendPublish appends the payload of a publish command to b:
// {"channel":<channel>,"data":<data>}, data being a JSON value that goes
// to the subscribers as it is.
func AppendPublish(b []byte, channel string, data []byte) []byte {
	b = append(b, `{"channel":`...)
	b = strconv.AppendQuote(b, channel)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, '}')
}
