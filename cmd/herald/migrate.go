package main

import (
	"context"
	"fmt"
	"io"
)

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st := newSettings("migrate")
	st.fs.SetOutput(stderr)
	var (
		store   storeSettings
		trigger bool
		create  bool
		logs    logSettings
	)
	store.register(st)
	logs.register(st)
	st.Bool(&trigger, "outbox-notify", true, "PostgreSQL: install the NOTIFY trigger that wakes the Worker (off = polling only)")
	store.registerCreate(st, &create)
	if err := st.parse(args); err != nil {
		return err
	}
	if st.fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, st.fs.Arg(0))
	}
	log, err := logs.logger(stderr)
	if err != nil {
		return err
	}
	st.logIgnored(log)
	if err := store.checkExisting(create, "creates it with an empty outbox"); err != nil {
		return err
	}
	s, err := openStore(ctx, store, trigger, log)
	if err != nil {
		return err
	}
	if err := s.Close(); err != nil {
		return err
	}
	where := "SQLite " + store.url()
	if store.isPostgres() {
		where = "PostgreSQL (schema herald)"
	}
	fmt.Fprintf(stdout, "outbox schema is up to date in %s\n", where)
	return nil
}
