package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/heraldgw/herald/auth"
)

// runRevoke records a revocation, or lists them with `herald revoke list`.
//
// It must use the store the nodes read, and it picks it as `herald serve`
// does (openRevocations): Redis when --redis-url is set, else the
// PostgreSQL of --database-url, else the SQLite file in --data-dir. The
// settings come from the same sources as serve's (flags, HERALD_*
// environment, --config, which may be the nodes' own serve config file).
// A PostgreSQL --database-url without --redis-url is ambiguous: nodes
// started with that database and a --redis-url read Redis, so a
// revocation written to PostgreSQL would cut nothing. revoke refuses it
// unless --no-redis says the nodes run without Redis.
func runRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	list := len(args) > 0 && args[0] == "list"
	if list {
		args = args[1:]
	}
	st := newSettings("revoke")
	st.fs.SetOutput(stderr)
	var (
		store            storeSettings
		logs             logSettings
		broker           brokerSettings
		sid, jti, reason string
		forTime          time.Duration
		noRedis          bool
	)
	st.fs.Usage = func() {
		w := st.fs.Output()
		fmt.Fprintln(w, "Usage: herald revoke --sid S | --jti J [flags]   or   herald revoke list [flags]")
		fmt.Fprintln(w, "\nRecords the revocation where the nodes read it, chosen as herald serve chooses:")
		fmt.Fprintln(w, "Redis with --redis-url; else PostgreSQL with --database-url postgres://… and --no-redis;")
		fmt.Fprintln(w, "else the SQLite file in --data-dir. Give the nodes' own settings: the same flags,")
		fmt.Fprintln(w, "HERALD_* variables, or --config with the nodes' serve config file (its other keys are")
		fmt.Fprintln(w, "ignored). A PostgreSQL --database-url without --redis-url is refused unless --no-redis")
		fmt.Fprintln(w, "confirms the nodes run without Redis: nodes with --redis-url never read PostgreSQL.")
		fmt.Fprintln(w)
		st.fs.PrintDefaults()
	}
	store.register(st)
	broker.registerRedis(st)
	logs.register(st)
	st.Bool(&noRedis, "no-redis", false, "the nodes run without --redis-url, so they read revocations from --database-url's PostgreSQL; required to use that store (without it and without --redis-url, a PostgreSQL --database-url is refused)")
	st.invocation(func() {
		st.String(&sid, "sid", "", "revoke every token whose sid claim is this value (the user's sign-in, as the application named it)")
		st.String(&jti, "jti", "", "revoke the token with this id")
		st.String(&reason, "reason", "", "why (kept for operators)")
		st.Duration(&forTime, "for", 24*time.Hour, "how long to keep the revocation: at least the longest remaining lifetime of the tokens it must stop")
	})
	if err := st.parse(args); err != nil {
		return err
	}
	if st.fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (use: herald revoke --sid S | --jti J, or herald revoke list)", errUsage, st.fs.Arg(0))
	}
	log, err := logs.logger(stderr)
	if err != nil {
		return err
	}
	st.logIgnored(log)
	if !list {
		if (sid == "") == (jti == "") {
			return fmt.Errorf("%w: give exactly one of --sid and --jti", errUsage)
		}
		if forTime <= 0 {
			return fmt.Errorf("%w: --for must be positive", errUsage)
		}
	}
	if err := revocationStoreKnown(store, broker, noRedis); err != nil {
		return err
	}
	rdb, err := openRedis(ctx, broker)
	if err != nil {
		return err
	}
	if rdb != nil {
		defer rdb.Close()
	}
	rs, where, closeFn, err := openRevocations(ctx, store, broker, rdb)
	if err != nil {
		return err
	}
	defer closeFn()
	if list {
		all, err := rs.List(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tID\tUNTIL\tREASON")
		for _, r := range all {
			kind, id := "sid", r.SessionID
			if id == "" {
				kind, id = "jti", r.TokenID
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", kind, id, r.Until.UTC().Format(time.RFC3339), r.Reason)
		}
		return tw.Flush()
	}
	until := time.Now().Add(forTime)
	if err := rs.Revoke(ctx, auth.Revocation{SessionID: sid, TokenID: jti, Until: until, Reason: reason}); err != nil {
		return err
	}
	what := "session " + sid
	if jti != "" {
		what = "token " + jti
	}
	fmt.Fprintf(stdout, "revoked %s until %s (stored in %s); connections using it are cut within one revalidation interval\n",
		what, until.UTC().Format(time.RFC3339), where)
	return nil
}

// revocationStoreKnown refuses the one configuration where revoke cannot
// tell which store the nodes read: a PostgreSQL store without Redis.
func revocationStoreKnown(store storeSettings, broker brokerSettings, noRedis bool) error {
	switch {
	case noRedis && broker.RedisURL != "":
		return fmt.Errorf("%w: --no-redis and --redis-url contradict each other: nodes with --redis-url read revocations from Redis", errUsage)
	case broker.RedisURL == "" && store.isPostgres() && !noRedis:
		return fmt.Errorf("%w: no --redis-url: nodes started with --redis-url read revocations from Redis, not from --database-url, "+
			"so a revocation stored in PostgreSQL would cut nothing. Pass the nodes' --redis-url (with their --redis-key-prefix and --redis-cluster), "+
			"or --config with the nodes' config file; if the nodes run without --redis-url, pass --no-redis", errUsage)
	}
	return nil
}
