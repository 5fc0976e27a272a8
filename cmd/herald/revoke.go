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
func runRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	list := len(args) > 0 && args[0] == "list"
	if list {
		args = args[1:]
	}
	st := newSettings("revoke")
	st.fs.SetOutput(stderr)
	var (
		store            storeSettings
		broker           brokerSettings
		sid, jti, reason string
		forTime          time.Duration
	)
	store.register(st)
	broker.registerRedis(st)
	st.String(&sid, "sid", "", "revoke every token of this session id")
	st.String(&jti, "jti", "", "revoke the token with this id")
	st.String(&reason, "reason", "", "why (kept for operators)")
	st.Duration(&forTime, "for", 24*time.Hour, "how long to keep the revocation: at least the longest remaining lifetime of the tokens it must stop")
	if err := st.parse(args); err != nil {
		return err
	}
	if st.fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (use: herald revoke --sid S | --jti J, or herald revoke list)", errUsage, st.fs.Arg(0))
	}
	if !list {
		if (sid == "") == (jti == "") {
			return fmt.Errorf("%w: give exactly one of --sid and --jti", errUsage)
		}
		if forTime <= 0 {
			return fmt.Errorf("%w: --for must be positive", errUsage)
		}
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
