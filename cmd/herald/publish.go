package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"

	"github.com/heraldgw/herald/outboxfeed/outboxdb"
	"github.com/heraldgw/herald/outboxfeed/pgstore"
	"github.com/heraldgw/herald/outboxfeed/sqlitestore"
	"github.com/heraldgw/herald/outboxfeed/stage"
	"github.com/jackc/pgx/v5"

	"github.com/heraldgw/herald/outboxfeed"
)

func runPublish(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st := newCommandSettings("publish", stderr)
	var (
		store               storeSettings
		logs                logSettings
		n                   stage.Notification
		data, freshness, id string
		create              bool
	)
	store.register(st)
	store.registerCreate(st, &create)
	logs.register(st)
	st.invocation(func() {
		st.String(&n.TenantID, "tenant", "", "tenant id (required)")
		st.String(&n.Channel, "channel", "", "channel name (required)")
		st.String(&n.Type, "type", "", "notification type, [a-z0-9_.-] (required)")
		st.Int(&n.SchemaVersion, "schema-version", 1, "schema version of the payload (≥ 1)")
		st.String(&data, "data", "", "payload: any JSON value (required)")
		st.String(&freshness, "freshness", "", `freshness object; empty = {"mode":"immediate"}`)
		st.String(&id, "id", "", "message id (uuid); empty = generated")
		st.String(&n.Kind, "kind", stage.KindNotification, "record kind")
	})
	if err := st.parseCommand(args); err != nil {
		return err
	}
	if data == "" {
		return fmt.Errorf("%w: --data is required (a JSON value such as '{\"status\":\"paid\"}')", errUsage)
	}
	if !json.Valid([]byte(data)) {
		return fmt.Errorf("%w: --data is not valid JSON", errUsage)
	}
	n.Payload = json.RawMessage(data)
	if freshness != "" {
		n.Freshness = json.RawMessage(freshness)
	}
	n.ID = id
	if err := n.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	log, err := logs.logger(stderr)
	if err != nil {
		return err
	}
	st.logIgnored(log)
	if err := store.checkExisting(create, "creates a new, empty outbox there (one that no node reads until a node uses that --data-dir)"); err != nil {
		return err
	}
	// The embedded store is created only when asked; a PostgreSQL schema is
	// the operator's (herald migrate), and its NOTIFY trigger setting is not
	// ours to change here.
	var s outboxfeed.Store
	if store.isPostgres() {
		s, err = outboxdb.Open(ctx, outboxdb.Config{DatabaseURL: store.url(), Logger: log})
	} else {
		s, err = openStore(ctx, store, false, log)
	}
	if err != nil {
		return err
	}
	defer s.Close()
	got, err := stageOne(ctx, s, n)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, got)
	if !store.isPostgres() {
		if active, known := consumerActive(store.DataDir); known && !active {
			dir, _ := filepath.Abs(store.DataDir)
			log.Warn("no herald serve or feed consumes this outbox now: the notification waits until one starts on this --data-dir (if your nodes use PostgreSQL, pass their --database-url)",
				"data_dir", dir)
		}
	}
	return nil
}

// stageOne stages n in a transaction of its own on the store's
// connection, as a producer would, and wakes the Workers of this process
// (none here; a node's are woken by the NOTIFY trigger, or poll).
func stageOne(ctx context.Context, s outboxfeed.Store, n stage.Notification) (string, error) {
	switch s := s.(type) {
	case *pgstore.Store:
		var id string
		err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
			var err error
			id, err = stage.Stage(ctx, tx, n)
			return err
		})
		return id, err
	case *sqlitestore.Store:
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			return "", err
		}
		id, err := stage.StageSQL(ctx, tx, stage.SQLite, n)
		if err != nil {
			_ = tx.Rollback()
			return "", err
		}
		return id, tx.Commit()
	}
	return "", fmt.Errorf("publish: cannot stage into a %T", s)
}
