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
// It must use the stores the nodes read, and it picks them as `herald
// serve` does (openRevocations): the PostgreSQL of --database-url, else
// the SQLite file in --data-dir, and Redis too when --redis-url is set.
// Nodes read the database whether or not they have Redis, so a
// revocation recorded there alone cuts on every node. The settings come
// from the same sources as serve's (flags, HERALD_* environment,
// --config, which may be the nodes' own serve config file).
func runRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	list := len(args) > 0 && args[0] == "list"
	if list {
		args = args[1:]
	}
	st := newCommandSettings("revoke", stderr)
	var (
		store            storeSettings
		logs             logSettings
		broker           brokerSettings
		sid, jti, reason string
		forTime, maxLife time.Duration
		noRedis          bool
	)
	st.fs.Usage = func() {
		w := st.fs.Output()
		fmt.Fprintln(w, "Usage: herald revoke --sid S | --jti J [flags]   or   herald revoke list [flags]")
		fmt.Fprintln(w, "\nRecords the revocation where the nodes read it, chosen as herald serve chooses:")
		fmt.Fprintln(w, "the PostgreSQL of --database-url postgres://…, else the SQLite file in --data-dir, and")
		fmt.Fprintln(w, "Redis too with --redis-url (nodes read both). Give the nodes' own settings: the same")
		fmt.Fprintln(w, "flags, HERALD_* variables, or --config with the nodes' serve config file (its other")
		fmt.Fprintln(w, "keys are ignored).")
		fmt.Fprintln(w)
		st.fs.PrintDefaults()
	}
	store.register(st)
	broker.registerRedis(st)
	logs.register(st)
	st.Bool(&noRedis, "no-redis", false, "the nodes run without --redis-url (accepted for older scripts; not needed: every node reads revocations from the database, with or without Redis)")
	st.invocation(func() {
		st.String(&sid, "sid", "", "revoke every token whose sid claim is this value (the user's sign-in, as the application named it)")
		st.String(&jti, "jti", "", "revoke the token with this id")
		st.String(&reason, "reason", "", "why (kept for operators)")
		st.Duration(&forTime, "for", 0, "how long to keep the revocation: at least the longest remaining lifetime of the tokens it must stop; 0 = --max-token-lifetime, which the nodes enforce, so it outlives every token they accept")
	})
	registerMaxTokenLifetime(st, &maxLife)
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
		if forTime < 0 {
			return fmt.Errorf("%w: --for must be positive (0 = --max-token-lifetime)", errUsage)
		}
		if forTime == 0 {
			forTime = maxLife
		}
		if forTime <= 0 { // the nodes accept any lifetime: keep the default
			forTime = auth.DefaultMaxTokenLifetime
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

// revocationStoreKnown refuses settings that contradict each other.
func revocationStoreKnown(_ storeSettings, broker brokerSettings, noRedis bool) error {
	if noRedis && broker.usesRedis() {
		return fmt.Errorf("%w: --no-redis and --redis-url contradict each other: pass the nodes' own settings", errUsage)
	}
	return nil
}
