package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/heraldgw/herald/outboxfeed/outboxdb"
)

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st := newCommandSettings("migrate", stderr)
	var (
		store   storeSettings
		trigger bool
		create  bool
		logs    logSettings
		to      int
	)
	store.register(st)
	logs.register(st)
	st.Bool(&trigger, "outbox-notify", true, "PostgreSQL: install the NOTIFY trigger that wakes the Worker (off = polling only)")
	store.registerCreate(st, &create)
	st.invocation(func() {
		st.Int(&to, "to", 0, "take the outbox schema to this version (0 = the newest this release knows); below the database's version, reverse the steps since, where they can be (docs/runbooks/rollback-schema.md)")
	})
	log, err := st.parseLogged(args, &logs, stderr)
	if err != nil {
		return err
	}
	if err := store.checkExisting(create, "creates it with an empty outbox"); err != nil {
		return err
	}
	where := "SQLite " + store.url()
	if store.isPostgres() {
		where = "PostgreSQL (schema herald)"
	}
	if to != 0 {
		return migrateTo(ctx, store, trigger, log, to, where, stdout)
	}
	s, err := openStore(ctx, store, trigger, log)
	if err != nil {
		return err
	}
	if err := s.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "outbox schema is up to date in %s\n", where)
	return nil
}

// versionedStore is a store whose schema can be taken to a version, back
// too (both of Herald's stores).
type versionedStore interface {
	MigrateTo(ctx context.Context, version int) error
	SchemaVersion(ctx context.Context) (int, error)
}

// migrateTo runs herald migrate --to: the schema to version to, up or
// back.
func migrateTo(ctx context.Context, store storeSettings, trigger bool, log *slog.Logger, to int, where string, stdout io.Writer) (err error) {
	st, err := outboxdb.Open(ctx, outboxdb.Config{DatabaseURL: store.url(), DisableNotifyTrigger: !trigger, Logger: log})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	vs, ok := st.(versionedStore)
	if !ok {
		return fmt.Errorf("%w: --to: the store %T has no schema versions", errUsage, st)
	}
	from, err := vs.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if err := vs.MigrateTo(ctx, to); err != nil {
		return err
	}
	switch {
	case to < from:
		fmt.Fprintf(stdout, "outbox schema taken back from version %d to %d in %s\n", from, to, where)
	case to > from:
		fmt.Fprintf(stdout, "outbox schema taken from version %d to %d in %s\n", from, to, where)
	default:
		fmt.Fprintf(stdout, "outbox schema is at version %d in %s\n", to, where)
	}
	return nil
}
