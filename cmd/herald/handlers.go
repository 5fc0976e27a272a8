package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
)

// handlersCommands are the subcommands of `herald handlers`.
func handlersCommands() []command {
	return []command{
		{"list", "list the handlers with their state, backlog, dead letters and target health", runHandlersList},
		{"pause", "pause a handler: its records wait, none lost (--reason)", handlerStateCommand("pause", outboxfeed.HandlerPaused)},
		{"resume", "resume a paused handler", handlerStateCommand("resume", outboxfeed.HandlerActive)},
		{"enable", "enable a handler that was disabled (410 Gone, or failing past disable_after)", handlerStateCommand("enable", outboxfeed.HandlerActive)},
		{"drop", "delete a handler removed from the config, with its positions, retries and dead letters", runHandlersDrop},
	}
}

func runHandlers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := "Usage: herald handlers <subcommand> [flags] [NAME]   (herald handlers <subcommand> -h for its flags)"
	return runSubcommand(ctx, args, stdout, stderr, handlersCommands(), usage, 8, "list, pause, resume, enable or drop")
}

// withHandlerStore parses args (at most want positional arguments, the
// handler's name), opens the store and runs f on its handler side.
func withHandlerStore(ctx context.Context, sub string, args []string, stderr io.Writer, register func(*settings), want int,
	f func(hs outboxfeed.HandlerStore, names []string) error) error {
	st, c := newOperatorSettings("handlers "+sub, stderr)
	if register != nil {
		register(st)
	}
	if err := st.parse(args); err != nil {
		return err
	}
	if c.handler != outboxfeed.RealtimeHandler {
		return fmt.Errorf("%w: herald handlers %s takes the handler's name as its argument, not --handler", errUsage, sub)
	}
	if st.fs.NArg() != want {
		if want == 0 {
			return fmt.Errorf("%w: unexpected argument %q", errUsage, st.fs.Arg(0))
		}
		return fmt.Errorf("%w: want the handler's name (herald handlers list)", errUsage)
	}
	s, closeStore, err := c.openStore(ctx, stderr)
	if err != nil {
		return err
	}
	defer closeStore()
	hs, ok := s.(outboxfeed.HandlerStore)
	if !ok {
		return errNoHandlerStore
	}
	return f(hs, st.fs.Args())
}

// handlerRow is one handler as list prints it.
type handlerRow struct {
	outboxfeed.HandlerInfo
	Pending       int64     `json:"pending"`
	DeadLetter    int64     `json:"dead_letter"`
	OldestPending time.Time `json:"oldest_pending,omitzero"`
}

func runHandlersList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var asJSON bool
	return withHandlerStore(ctx, "list", args, stderr, func(st *settings) {
		st.Bool(&asJSON, "json", false, "print one JSON object per handler")
	}, 0, func(hs outboxfeed.HandlerStore, _ []string) error {
		list, err := hs.Handlers(ctx)
		if err != nil {
			return err
		}
		rows := make([]handlerRow, 0, len(list))
		for _, h := range list {
			st, err := hs.ForHandler(h.Name).Stats(ctx)
			if err != nil {
				return err
			}
			rows = append(rows, handlerRow{HandlerInfo: h, Pending: st.Pending, DeadLetter: st.DeadLetter, OldestPending: st.OldestPending})
		}
		if asJSON {
			return writeJSONLines(stdout, rows)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tTYPE\tSTATE\tPENDING\tDEAD_LETTER\tOLDEST_PENDING\tWORKERS\tFAILING_SINCE\tREASON_OR_LAST_ERROR")
		for _, r := range rows {
			why := r.StateReason
			if why == "" {
				why = r.LastError
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", r.Name, r.Type, r.State, r.Pending, r.DeadLetter,
				orDash(r.OldestPending), r.Readers, orDash(r.FailingSince), truncateForTable(why))
		}
		return tw.Flush()
	})
}

func orDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func truncateForTable(s string) string {
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}

// handlerStateCommand is pause, resume or enable.
func handlerStateCommand(sub string, state outboxfeed.HandlerState) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		var reason string
		return withHandlerStore(ctx, sub, args, stderr, func(st *settings) {
			st.String(&reason, "reason", "", "why, shown by herald handlers list")
		}, 1, func(hs outboxfeed.HandlerStore, names []string) error {
			name := names[0]
			list, err := hs.Handlers(ctx)
			if err != nil {
				return err
			}
			var cur *outboxfeed.HandlerInfo
			for i := range list {
				if list[i].Name == name {
					cur = &list[i]
				}
			}
			switch {
			case cur == nil:
				return fmt.Errorf("%w: %s", outboxfeed.ErrNoHandler, name)
			case sub == "resume" && cur.State == outboxfeed.HandlerDisabled:
				return fmt.Errorf("%w: %s is disabled, not paused (%s): check its endpoint, then herald handlers enable %s", errUsage, name, cur.StateReason, name)
			case sub == "enable" && cur.State == outboxfeed.HandlerPaused:
				return fmt.Errorf("%w: %s is paused, not disabled: herald handlers resume %s", errUsage, name, name)
			}
			if reason == "" {
				reason = "herald handlers " + sub
			}
			if err := hs.SetHandlerState(ctx, name, state, reason); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s: %s\n", name, state)
			return nil
		})
	}
}

func runHandlersDrop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var yes bool
	return withHandlerStore(ctx, "drop", args, stderr, func(st *settings) {
		st.Bool(&yes, "yes", false, "confirm: the handler's positions, retry queue and dead letters are deleted")
	}, 1, func(hs outboxfeed.HandlerStore, names []string) error {
		if !yes {
			return fmt.Errorf("%w: dropping %s deletes its positions, retries and dead letters: add --yes", errUsage, names[0])
		}
		if err := hs.DropHandler(ctx, names[0]); err != nil {
			if errors.Is(err, outboxfeed.ErrInvalidRequest) {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
			return err
		}
		fmt.Fprintf(stdout, "%s: dropped\n", names[0])
		return nil
	})
}
