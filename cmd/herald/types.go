package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/outboxdb"
)

// typesSettings are the settings of `herald types` and `herald types
// check` (one command, one set of settings: check only reads more).
type typesSettings struct {
	st      *settings
	store   storeSettings
	logs    logSettings
	types   string
	asJSON  bool
	typ     string
	version int
}

func newTypesSettings(stderr io.Writer) *typesSettings {
	c := &typesSettings{st: newCommandSettings("types", stderr)}
	c.st.String(&c.types, "types", "", "type catalogue JSON file (docs/events.md), the one serve and feed read; empty = none: every type is read at any schema_version ≥ 1")
	c.store.register(c.st)
	c.logs.register(c.st)
	c.st.invocation(func() {
		c.st.Bool(&c.asJSON, "json", false, "herald types: print the catalogue as JSON instead of a table")
		c.st.String(&c.typ, "type", "", "herald types check: the type a new writer will stage")
		c.st.Int(&c.version, "version", 0, "herald types check: its schema_version")
	})
	c.st.fs.Usage = func() {
		fmt.Fprintln(c.st.fs.Output(), "Usage: herald types [--types FILE] [--json]")
		fmt.Fprintln(c.st.fs.Output(), "       herald types check --type T --version N [--types FILE] [--database-url URL]")
		fmt.Fprintln(c.st.fs.Output(), "\nPrints the type catalogue; check exits 1 unless every live Worker of every handler the catalogue routes T vN to (every handler when it names none) reads it: run it before deploying writers of a new version (docs/events.md).")
		c.st.fs.PrintDefaults()
	}
	return c
}

// runTypes prints the catalogue, or with "check" gates a writer of a new
// (type, version) on the live Workers reading it.
func runTypes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	check := len(args) > 0 && args[0] == "check"
	if check {
		args = args[1:]
	}
	c := newTypesSettings(stderr)
	if err := c.st.parse(args); err != nil {
		return err
	}
	if c.st.fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (the only subcommand is check)", errUsage, c.st.fs.Arg(0))
	}
	var reg *outboxfeed.Registry
	if c.types != "" {
		r, err := outboxfeed.LoadRegistry(c.types)
		if err != nil {
			return fmt.Errorf("config: --types: %w", err)
		}
		reg = r
	}
	if check {
		return c.check(ctx, reg, stdout, stderr)
	}
	if c.typ != "" || c.version != 0 {
		return fmt.Errorf("%w: --type and --version are flags of herald types check", errUsage)
	}
	if c.asJSON {
		return writeCatalogueJSON(stdout, reg)
	}
	if reg == nil {
		fmt.Fprintln(stdout, "no catalogue (--types): every type is read at any schema_version ≥ 1")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tVERSION\tKIND\tDIRECTION\tTRUST\tHANDLERS\tSCHEMA\tDESCRIPTION")
	for _, e := range reg.Entries() {
		schema := "-"
		if e.Schema != nil {
			schema = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Type, e.Version, dash(e.Kind), dash(string(e.Direction)),
			dash(string(e.Trust)), dash(strings.Join(e.Handlers, ",")), schema, e.Description)
	}
	return tw.Flush()
}

// catalogueEntry is one entry of `herald types --json`.
type catalogueEntry struct {
	Type        string          `json:"type"`
	Version     int             `json:"version"`
	Description string          `json:"description,omitempty"`
	Kind        string          `json:"kind,omitempty"`
	Direction   string          `json:"direction,omitempty"`
	Trust       string          `json:"trust,omitempty"`
	Handlers    []string        `json:"handlers,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
}

func writeCatalogueJSON(w io.Writer, reg *outboxfeed.Registry) error {
	out := []catalogueEntry{}
	for _, e := range reg.Entries() {
		out = append(out, catalogueEntry{Type: e.Type, Version: e.Version, Description: e.Description, Kind: e.Kind,
			Direction: string(e.Direction), Trust: string(e.Trust), Handlers: e.Handlers, Schema: e.Schema})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// check runs `herald types check`.
func (c *typesSettings) check(ctx context.Context, reg *outboxfeed.Registry, stdout, stderr io.Writer) error {
	if c.asJSON {
		return fmt.Errorf("%w: --json is a flag of herald types, not of check", errUsage)
	}
	if c.typ == "" || c.version < 1 {
		return fmt.Errorf("%w: check needs --type T and --version N (N ≥ 1)", errUsage)
	}
	tv := outboxfeed.TypeVersion{Type: c.typ, Version: c.version}
	var handlers []string
	if reg != nil {
		e, ok := reg.Entry(tv.Type, tv.Version)
		if !ok {
			return fmt.Errorf("%s: the catalogue %s does not list it: add it there and deploy the Workers with it first", tv, c.types)
		}
		handlers = e.Handlers
	}
	log, err := c.logs.logger(stderr)
	if err != nil {
		return err
	}
	c.st.logIgnored(log)
	if !c.store.isPostgres() {
		if err := c.store.checkExisting(false, ""); err != nil {
			return err
		}
	}
	s, err := outboxdb.Open(ctx, outboxdb.Config{DatabaseURL: c.store.url(), Logger: log})
	if err != nil {
		return err
	}
	defer s.Close()
	rr, ok := s.(outboxfeed.ReaderRegistry)
	if !ok {
		return errors.New("this store does not record which types its Workers read")
	}
	readers, err := rr.Readers(ctx)
	if err != nil {
		return err
	}
	if err := outboxfeed.CheckReaders(readers, tv, handlers); err != nil {
		return fmt.Errorf("%v: deploy Workers that read it (readers before writers), then check again", err)
	}
	n := 0
	for _, r := range readers {
		if len(handlers) == 0 || slices.Contains(handlers, r.Handler) {
			n++
		}
	}
	scope := "every handler"
	if len(handlers) > 0 {
		scope = "handlers " + strings.Join(handlers, ", ")
	}
	fmt.Fprintf(stdout, "%s: read by all %d live Workers of %s\n", tv, n, scope)
	return nil
}
