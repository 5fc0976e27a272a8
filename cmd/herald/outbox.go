package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldgw/herald/outboxfeed/outboxdb"
	"github.com/heraldgw/herald/outboxfeed/stage"

	"github.com/heraldgw/herald/outboxfeed"
)

// outboxCommands are the subcommands of `herald outbox`.
func outboxCommands() []command {
	return []command{
		{"stats", "count records per state and kind, dead letters per type, the oldest waiting record", runOutboxStats},
		{"list", "list records with their state, attempt and last error", runOutboxList},
		{"show", "show one record (--id) and its state for every handler", runOutboxShow},
		{"replay", "move dead letters back to pending (audited; --actor and --reason required)", runOutboxReplay},
		{"purge", "delete dispatched or dead-lettered records older than an age, in small batches", runOutboxPurge},
		{"partitions", "list the partitions and their leases; --set N changes their number (PostgreSQL)", runOutboxPartitions},
		{"reset-after-restore", "make positions copied from another PostgreSQL cluster (a logical restore) safe again", runOutboxResetAfterRestore},
	}
}

func runOutbox(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := "Usage: herald outbox <subcommand> [flags]   (herald outbox <subcommand> -h for its flags)"
	return runSubcommand(ctx, args, stdout, stderr, outboxCommands(), usage, 10,
		"stats, list, replay, purge, partitions or reset-after-restore")
}

// runSubcommand runs the subcommand of a command (outbox, handlers) that
// args[0] names. Its usage is line, then subs with their summaries
// (names in a column of width); want names them in the errors.
func runSubcommand(ctx context.Context, args []string, stdout, stderr io.Writer, subs []command, line string, width int, want string) error {
	usage := func() {
		fmt.Fprintln(stderr, line)
		fmt.Fprintln(stderr, "\nSubcommands:")
		for _, c := range subs {
			fmt.Fprintf(stderr, "  %-*s %s\n", width, c.name, c.summary)
		}
	}
	if len(args) == 0 {
		usage()
		return fmt.Errorf("%w: want a subcommand: %s", errUsage, want)
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage()
		return nil
	}
	for _, c := range subs {
		if c.name == args[0] {
			if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			return nil
		}
	}
	usage()
	return fmt.Errorf("%w: unknown subcommand %q: want %s", errUsage, args[0], want)
}

// outboxCommon are the settings every outbox subcommand has.
type outboxCommon struct {
	st      *settings
	store   storeSettings
	logs    logSettings
	handler string
}

func newOutboxSettings(sub string, stderr io.Writer) (*settings, *outboxCommon) {
	return newOperatorSettings("outbox "+sub, stderr)
}

// newOperatorSettings are the settings of an operator command (herald
// outbox …, herald handlers …) named cmd.
func newOperatorSettings(cmd string, stderr io.Writer) (*settings, *outboxCommon) {
	st := newCommandSettings(cmd, stderr)
	c := &outboxCommon{st: st}
	c.store.register(st)
	c.logs.register(st)
	// What a subcommand registers next (filters, --actor, --json…) is
	// given per invocation: flags only, no variable, no config key.
	st.perInvocation = true
	st.String(&c.handler, "handler", outboxfeed.RealtimeHandler, "the handler whose records, dead letters and positions to work on (herald handlers list)")
	return st, c
}

// run parses args, refusing positional arguments, and checks what they
// say with check (nil: nothing to check); then it opens the configured
// store (open), runs f with its Admin and closes the store. A usage error
// is reported before the store is opened.
func (c *outboxCommon) run(ctx context.Context, args []string, stderr io.Writer, check func() error, f func(outboxfeed.Admin) error) error {
	if err := c.st.parseCommand(args); err != nil {
		return err
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	a, closeStore, err := c.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer closeStore()
	return f(a)
}

// open connects to the configured store and returns the Admin of the
// --handler's records. It never creates an embedded store (there is
// nothing to operate on) nor changes a PostgreSQL schema (that is `herald
// migrate`).
func (c *outboxCommon) open(ctx context.Context, stderr io.Writer) (outboxfeed.Admin, func(), error) {
	s, closeStore, err := c.openStore(ctx, stderr)
	if err != nil {
		return nil, nil, err
	}
	if c.handler != outboxfeed.RealtimeHandler {
		if s, err = forHandler(ctx, s, c.handler); err != nil {
			closeStore()
			return nil, nil, err
		}
	}
	a, err := outboxfeed.AdminOf(s)
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	return a, closeStore, nil
}

// openStore connects to the configured store.
func (c *outboxCommon) openStore(ctx context.Context, stderr io.Writer) (outboxfeed.Store, func(), error) {
	log, err := c.logs.logger(stderr)
	if err != nil {
		return nil, nil, err
	}
	c.st.logIgnored(log)
	var s outboxfeed.Store
	if c.store.isPostgres() {
		s, err = outboxdb.Open(ctx, outboxdb.Config{DatabaseURL: c.store.url(), Logger: log})
	} else {
		if err := c.store.checkExisting(false, ""); err != nil {
			return nil, nil, err
		}
		s, err = openStore(ctx, c.store, false, log)
	}
	if err != nil {
		return nil, nil, err
	}
	return s, func() { _ = s.Close() }, nil
}

// forHandler returns the Store of a handler the store knows.
func forHandler(ctx context.Context, s outboxfeed.Store, name string) (outboxfeed.Store, error) {
	hs, ok := s.(outboxfeed.HandlerStore)
	if !ok {
		return nil, fmt.Errorf("--handler %s: %w", name, errNoHandlerStore)
	}
	list, err := hs.Handlers(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, h := range list {
		if h.Name == name {
			return hs.ForHandler(name), nil
		}
		names = append(names, h.Name)
	}
	return nil, fmt.Errorf("%w: --handler %s: %w (the store knows %s)", errUsage, name, outboxfeed.ErrNoHandler, strings.Join(names, ", "))
}

// adminErr turns an invalid request into a usage error.
func adminErr(err error) error {
	if errors.Is(err, outboxfeed.ErrInvalidRequest) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return err
}

// parseAge reads a Go duration ("36h", "90m") or a number of days ("7d").
func parseAge(flagName, s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err == nil && n >= 0 {
			return time.Duration(n * float64(24*time.Hour)), nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%w: %s %q: want an age such as 7d, 36h or 90m", errUsage, flagName, s)
	}
	return d, nil
}

// parseWhen reads a time: RFC 3339 ("2025-01-02T15:04:05Z"), a date
// ("2025-01-02", UTC midnight), or an age meaning that long before now
// ("2h", "7d"). Empty is the zero time (no bound).
func parseWhen(flagName, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	d, err := parseAge(flagName, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s %q: want an RFC 3339 time, a date (2006-01-02) or an age such as 2h or 7d", errUsage, flagName, s)
	}
	return now.Add(-d), nil
}

// parseSpan reads --since and --until (parseWhen), both against the same
// now.
func parseSpan(since, until string) (from, to time.Time, err error) {
	now := time.Now()
	if from, err = parseWhen("--since", since, now); err != nil {
		return time.Time{}, time.Time{}, err
	}
	to, err = parseWhen("--until", until, now)
	return from, to, err
}

func runOutboxStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st, c := newOutboxSettings("stats", stderr)
	var asJSON bool
	st.Bool(&asJSON, "json", false, "print JSON instead of tables")
	return c.run(ctx, args, stderr, nil, func(a outboxfeed.Admin) error {
		s, err := a.Stats(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return writeStatsJSON(stdout, s)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "STATE\tRECORDS")
		for _, name := range []string{outboxfeed.StatePending, outboxfeed.StateProcessing, outboxfeed.StateDispatched, outboxfeed.StateDeadLetter} {
			fmt.Fprintf(tw, "%s\t%d\n", name, s.States[name])
		}
		_ = tw.Flush()
		if s.OldestPending.IsZero() {
			fmt.Fprintln(stdout, "\noldest waiting record: none")
		} else {
			fmt.Fprintf(stdout, "\noldest waiting record: occurred %s, %s ago\n",
				s.OldestPending.UTC().Format(time.RFC3339), s.OldestPendingAge.Round(time.Millisecond))
		}
		fmt.Fprint(stdout, "records per kind:")
		if len(s.Kinds) == 0 {
			fmt.Fprint(stdout, " none")
		}
		for _, k := range []string{stage.KindNotification, stage.KindIntegrationEvent, stage.KindJourneyStepCommand, stage.KindProviderSideEffect} {
			if n, ok := s.Kinds[k]; ok {
				fmt.Fprintf(stdout, " %s=%d", k, n)
			}
		}
		fmt.Fprintln(stdout)
		if len(s.DeadLetters) > 0 {
			fmt.Fprintln(stdout, "\ndead letters by type:")
			tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TYPE\tVERSION\tRECORDS")
			for _, tc := range s.DeadLetters {
				fmt.Fprintf(tw, "%s\t%d\t%d\n", tc.Type, tc.SchemaVersion, tc.Count)
			}
			_ = tw.Flush()
		}
		return nil
	})
}

func writeStatsJSON(w io.Writer, s outboxfeed.AdminStats) error {
	type typeCount struct {
		Type          string `json:"type"`
		SchemaVersion int    `json:"schema_version"`
		Count         int64  `json:"count"`
	}
	out := struct {
		Now              time.Time        `json:"now"`
		States           map[string]int64 `json:"states"`
		Kinds            map[string]int64 `json:"kinds"`
		OldestPending    *time.Time       `json:"oldest_pending"`
		OldestPendingAge float64          `json:"oldest_pending_age_seconds"`
		DeadLetters      []typeCount      `json:"dead_letters"`
	}{Now: s.Now.UTC(), States: s.States, Kinds: s.Kinds, OldestPendingAge: s.OldestPendingAge.Seconds(), DeadLetters: []typeCount{}}
	if !s.OldestPending.IsZero() {
		t := s.OldestPending.UTC()
		out.OldestPending = &t
	}
	for _, tc := range s.DeadLetters {
		out.DeadLetters = append(out.DeadLetters, typeCount(tc))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// runOutboxShow prints one record and its state for each handler.
func runOutboxShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st, c := newOutboxSettings("show", stderr)
	var id string
	var asJSON bool
	st.String(&id, "id", "", "the record's message id (required)")
	st.Bool(&asJSON, "json", false, "print one JSON object per handler")
	if err := st.parseCommand(args); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%w: --id is required", errUsage)
	}
	s, closeStore, err := c.openStore(ctx, stderr)
	if err != nil {
		return err
	}
	defer closeStore()
	type row struct {
		Handler   string    `json:"handler"`
		State     string    `json:"state"`
		Attempt   int       `json:"attempt"`
		LastError string    `json:"last_error,omitempty"`
		At        time.Time `json:"at,omitzero"`
	}
	handlers := []string{outboxfeed.RealtimeHandler}
	stores := map[string]outboxfeed.Store{outboxfeed.RealtimeHandler: s}
	if hs, ok := s.(outboxfeed.HandlerStore); ok {
		list, err := hs.Handlers(ctx)
		if err != nil {
			return err
		}
		for _, h := range list {
			if h.Name != outboxfeed.RealtimeHandler {
				handlers = append(handlers, h.Name)
				stores[h.Name] = hs.ForHandler(h.Name)
			}
		}
	}
	var first outboxfeed.Record
	var rows []row
	for _, h := range handlers {
		r, err := stores[h].Get(ctx, id)
		if errors.Is(err, outboxfeed.ErrNotFound) {
			return fmt.Errorf("%w: no record %s", errUsage, id)
		}
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			first = r
		}
		one := row{Handler: h, State: r.State.Name(), Attempt: r.Attempt, LastError: outboxfeed.LastError(r.State)}
		switch v := r.State.(type) {
		case outboxfeed.Dispatched:
			one.At = v.At
		case outboxfeed.DeadLetter:
			one.At = v.At
		}
		rows = append(rows, one)
	}
	if asJSON {
		return writeJSONLines(stdout, rows)
	}
	fmt.Fprintf(stdout, "id %s\ntenant %s  channel %s  kind %s  type %s v%d  occurred %s\n\n", first.ID, first.TenantID, first.Channel,
		first.Kind, first.Type, first.SchemaVersion, first.OccurredAt.UTC().Format(time.RFC3339Nano))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HANDLER\tSTATE\tATTEMPT\tAT\tLAST_ERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.Handler, r.State, r.Attempt, orDash(r.At), truncateForTable(r.LastError))
	}
	return tw.Flush()
}

func runOutboxList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st, c := newOutboxSettings("list", stderr)
	var (
		f            outboxfeed.Filter
		since, until string
		after        int
		asJSON       bool
	)
	st.String(&f.State, "state", "", "pending, processing, dispatched or dead_letter; empty = any")
	st.String(&f.Type, "type", "", "only this notification type")
	st.Int(&f.SchemaVersion, "schema-version", 0, "only this schema version; 0 = any")
	st.String(&f.Tenant, "tenant", "", "only this tenant")
	st.String(&f.Channel, "channel", "", "only this channel")
	st.String(&since, "since", "", "only records that occurred at or after: RFC 3339 time, date, or age such as 2h or 7d")
	st.String(&until, "until", "", "only records that occurred before: RFC 3339 time, date, or age such as 1h")
	st.Int(&f.Limit, "limit", 50, fmt.Sprintf("records per page (1–%d)", outboxfeed.MaxListLimit))
	st.Int(&after, "after", 0, "page cursor: list records after this seq (printed at the end of a full page)")
	st.Bool(&asJSON, "json", false, "print one JSON object per record")
	return c.run(ctx, args, stderr, func() error {
		var err error
		if f.Since, f.Until, err = parseSpan(since, until); err != nil {
			return err
		}
		f.After = int64(after)
		if f.Limit < 1 {
			return fmt.Errorf("%w: --limit %d: must be at least 1", errUsage, f.Limit)
		}
		return nil
	}, func(a outboxfeed.Admin) error {
		p, err := a.List(ctx, f)
		if err != nil {
			return adminErr(err)
		}
		if asJSON {
			enc := json.NewEncoder(stdout)
			for i := range p.Records {
				if err := enc.Encode(recordJSON(&p.Records[i])); err != nil {
					return err
				}
			}
		} else {
			tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tTYPE\tV\tTENANT\tCHANNEL\tATTEMPT\tOCCURRED_AT\tLAST_ERROR")
			for _, r := range p.Records {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.State.Name(), r.Type, r.SchemaVersion,
					r.TenantID, r.Channel, r.Attempt, r.OccurredAt.UTC().Format(time.RFC3339), oneLine(outboxfeed.LastError(r.State), 100))
			}
			_ = tw.Flush()
		}
		if p.Next != 0 {
			fmt.Fprintf(stderr, "more records may follow: add --after %d\n", p.Next)
		}
		return nil
	})
}

// writeJSONLines writes rows to w as --json prints them: one JSON object
// a line.
func writeJSONLines[T any](w io.Writer, rows []T) error {
	enc := json.NewEncoder(w)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// oneLine flattens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// recordJSON is a record as `herald outbox list --json` prints it.
func recordJSON(r *outboxfeed.Record) any {
	out := map[string]any{
		"id": r.ID, "seq": r.Seq, "state": r.State.Name(), "tenant_id": r.TenantID, "channel": r.Channel,
		"type": r.Type, "schema_version": r.SchemaVersion, "kind": r.Kind, "attempt": r.Attempt,
		"occurred_at": r.OccurredAt.UTC(), "payload": r.Payload, "freshness": r.Freshness,
	}
	switch s := r.State.(type) {
	case outboxfeed.Pending:
		out["next_attempt_at"] = s.NextAttemptAt.UTC()
		if s.LastError != "" {
			out["last_error"] = s.LastError
		}
	case outboxfeed.Processing:
		out["lease_owner"], out["lease_expires_at"], out["fence"] = s.LeaseOwner, s.LeaseExpiresAt.UTC(), s.Fence
	case outboxfeed.Dispatched:
		out["dispatched_at"] = s.At.UTC()
	case outboxfeed.DeadLetter:
		out["dead_lettered_at"], out["last_error"] = s.At.UTC(), s.Reason
	}
	return out
}

func runOutboxReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st, c := newOutboxSettings("replay", stderr)
	var (
		r            outboxfeed.ReplayRequest
		since, until string
	)
	st.StringList(&r.IDs, "id", "message id of a dead letter to replay; repeat the flag or separate with commas")
	st.String(&r.Type, "type", "", "replay the dead letters of this type")
	st.Int(&r.SchemaVersion, "schema-version", 0, "with --type: only this schema version; 0 = any")
	st.String(&since, "since", "", "replay dead letters that occurred at or after: RFC 3339 time, date, or age such as 2h")
	st.String(&until, "until", "", "replay dead letters that occurred before: RFC 3339 time, date, or age")
	st.String(&r.Actor, "actor", "", "who is replaying, recorded in outbox_replay (required)")
	st.String(&r.Reason, "reason", "", "why, e.g. an incident or change id, recorded in outbox_replay (required)")
	st.Int(&r.Limit, "limit", 0, "replay at most this many records; 0 = every one selected")
	return c.run(ctx, args, stderr, func() error {
		switch {
		case strings.TrimSpace(r.Actor) == "":
			return fmt.Errorf("%w: --actor is required: who is replaying (it is recorded in outbox_replay with each record)", errUsage)
		case strings.TrimSpace(r.Reason) == "":
			return fmt.Errorf("%w: --reason is required: why these records are replayed (it is recorded in outbox_replay with each record)", errUsage)
		case len(r.IDs) == 0 && r.Type == "" && since == "" && until == "":
			return fmt.Errorf("%w: select the dead letters to replay with --id, --type, --since or --until", errUsage)
		case r.Limit < 0:
			return fmt.Errorf("%w: --limit %d: must not be negative", errUsage, r.Limit)
		}
		var err error
		if r.Since, r.Until, err = parseSpan(since, until); err != nil {
			return err
		}
		return nil
	}, func(a outboxfeed.Admin) error {
		res, err := a.Replay(ctx, r)
		if err != nil {
			if len(res.Replayed) > 0 {
				fmt.Fprintf(stdout, "replayed %d dead letter(s) to pending before the error\n", len(res.Replayed))
			}
			return adminErr(err)
		}
		fmt.Fprintf(stdout, "replayed %d dead letter(s) to pending; skipped %d\n", len(res.Replayed), len(res.Skipped))
		for _, s := range res.Skipped {
			fmt.Fprintf(stdout, "skipped %s: %s\n", s.ID, s.Reason)
		}
		return nil
	})
}

func runOutboxPurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st, c := newOutboxSettings("purge", stderr)
	var (
		r         outboxfeed.PurgeRequest
		olderThan string
	)
	st.String(&r.State, "state", "", "dispatched or dead_letter (required); pending records are never purged")
	st.String(&olderThan, "older-than", "", "age since dispatched_at / dead_lettered_at, e.g. 7d or 36h; 0s = all (required)")
	st.String(&r.Type, "type", "", "only records of this type")
	st.Int(&r.SchemaVersion, "schema-version", 0, "with --type: only this schema version; 0 = any")
	st.Bool(&r.DryRun, "dry-run", false, "count what would be deleted, delete nothing")
	st.Int(&r.BatchSize, "batch-size", 1000, "records deleted per transaction")
	return c.run(ctx, args, stderr, func() error {
		switch {
		case r.State == "":
			return fmt.Errorf("%w: --state is required: dispatched or dead_letter", errUsage)
		case olderThan == "":
			return fmt.Errorf("%w: --older-than is required, e.g. 7d (0s purges every %s record)", errUsage, r.State)
		}
		var err error
		r.OlderThan, err = parseAge("--older-than", olderThan)
		return err
	}, func(a outboxfeed.Admin) error {
		res, err := a.Purge(ctx, r)
		if err != nil {
			if res.Deleted > 0 {
				fmt.Fprintf(stdout, "deleted %d %s record(s) before the error\n", res.Deleted, r.State)
			}
			return adminErr(err)
		}
		scope := r.State
		if r.Type != "" {
			scope += " " + r.Type
		}
		if r.SchemaVersion > 0 {
			scope += fmt.Sprintf(" v%d", r.SchemaVersion)
		}
		if r.DryRun {
			fmt.Fprintf(stdout, "dry run: %d %s record(s) older than %s (before %s) would be deleted\n",
				res.Deleted, scope, olderThan, res.Cutoff.UTC().Format(time.RFC3339))
			return nil
		}
		fmt.Fprintf(stdout, "deleted %d %s record(s) older than %s (before %s) in %d batch(es)\n",
			res.Deleted, scope, olderThan, res.Cutoff.UTC().Format(time.RFC3339), res.Batches)
		if res.Segments > 0 {
			fmt.Fprintf(stdout, "removed %d whole segment(s) of records all dispatched before %s\n",
				res.Segments, res.Cutoff.UTC().Format(time.RFC3339))
		}
		return nil
	})
}

func runOutboxPartitions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st, c := newOutboxSettings("partitions", stderr)
	var set int
	var asJSON bool
	st.Int(&set, "set", 0, "change the number of partitions to this (PostgreSQL; keeps each channel's order, see docs/delivery.md)")
	st.Bool(&asJSON, "json", false, "print JSON instead of a table")
	return c.run(ctx, args, stderr, nil, func(a outboxfeed.Admin) error {
		if set != 0 {
			if err := a.SetPartitions(ctx, set); err != nil {
				return adminErr(err)
			}
			fmt.Fprintf(stdout, "partition count set to %d: the current partitions retire once drained, then the new ones take over\n", set)
		}
		ps, err := a.Partitions(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(ps)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PARTITION\tSTATE\tOWNER\tLEASE EXPIRES\tFENCE\tOPEN\tTAKEOVERS\tLAST DONE\tBATCHES")
		for _, p := range ps {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%v\t%d\t%s\t%d\n", p.Partition, p.State, dash(p.Owner), timeOrDash(p.ExpiresAt),
				p.Fence, p.Open, p.Takeovers, timeOrDash(p.DoneAt), p.Batches)
		}
		return tw.Flush()
	})
}

// runOutboxResetAfterRestore: see outboxfeed.Admin.ResetAfterRestore and
// docs/runbooks/store-outage.md.
func runOutboxResetAfterRestore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	_, c := newOutboxSettings("reset-after-restore", stderr)
	return c.run(ctx, args, stderr, nil, func(a outboxfeed.Admin) error {
		res, err := a.ResetAfterRestore(ctx)
		if err != nil {
			return adminErr(err)
		}
		fmt.Fprintf(stdout, "positions reset: %d records not known delivered are queued again (due now), %d transaction ids rewritten; Workers may start\n",
			res.Requeued, res.Rewritten)
		return nil
	})
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
