package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// setting is one configuration knob: a flag, its HERALD_<NAME> environment
// variable and its key in the config file. Precedence: flag, environment,
// config file, default. A flag-only setting is given per invocation (the
// channel of one publish, the subject of one token): it has no variable and
// no config key, so that what a shell exports or a node's config file holds
// never changes it.
type setting struct {
	name     string
	usage    string
	value    flag.Value
	flagOnly bool
}

// settings collects the knobs of one subcommand.
type settings struct {
	fs   *flag.FlagSet
	list []setting
	cfg  *string // the --config flag
	// afterParse run once every source has been applied.
	afterParse []func()
	// checks run after afterParse; the first error fails parse.
	checks []func() error
	// perInvocation, while set, makes the settings added flag-only.
	perInvocation bool
	// from says where each setting a source gave came from; defaults are
	// absent.
	from map[string]origin
	// cfgPath is the config file read, ignored its keys that belong to
	// other commands (logIgnored reports them).
	cfgPath string
	ignored []string
}

// newCommandSettings are the settings of the command named cmd, which
// prints its usage and flag errors to stderr.
func newCommandSettings(cmd string, stderr io.Writer) *settings {
	s := newSettings(cmd)
	s.fs.SetOutput(stderr)
	return s
}

func newSettings(cmd string) *settings {
	fs := flag.NewFlagSet("herald "+cmd, flag.ContinueOnError)
	s := &settings{fs: fs, from: map[string]origin{}}
	s.cfg = fs.String("config", "", "config file (a JSON object, or a YAML mapping when the name ends in .yaml or .yml, whose keys are flag names; keys starting with # are comments; herald genconfig writes one); one file serves every command: keys of other commands are ignored; none is read unless named (env HERALD_CONFIG)")
	return s
}

func envName(flagName string) string {
	return "HERALD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (s *settings) add(name, usage string, v flag.Value) {
	st := setting{name: name, usage: usage, value: v, flagOnly: s.perInvocation}
	if !st.flagOnly {
		usage += " (env " + envName(name) + ")"
	}
	s.fs.Var(v, name, usage)
	s.list = append(s.list, st)
}

// invocation registers, with register, settings given per invocation:
// flags only, never read from the environment or a config file.
func (s *settings) invocation(register func()) {
	s.perInvocation = true
	defer func() { s.perInvocation = false }()
	register()
}

// configurable are the settings a config file and the environment may
// give: all but the flag-only ones, in registration order.
func (s *settings) configurable() []setting {
	var out []setting
	for _, st := range s.list {
		if !st.flagOnly {
			out = append(out, st)
		}
	}
	return out
}

// origin is where a setting's value came from.
type origin struct {
	desc string // "--name", "HERALD_NAME" or "FILE key \"name\""
	file bool   // a config file's key
}

// source says where setting name's value came from; the zero origin when
// it is the default.
func (s *settings) source(name string) origin { return s.from[name] }

// named is the setting flag, with where its value came from when that is
// not the flag itself: "--x (from HERALD_X)".
func (o origin) named(flag string) string {
	if o.desc == "" || o.desc == flag {
		return flag
	}
	return flag + " (from " + o.desc + ")"
}

// logIgnored lists at debug level the config-file keys parse skipped
// because they belong to other commands.
func (s *settings) logIgnored(log *slog.Logger) {
	if len(s.ignored) > 0 {
		log.Debug("config: keys of other herald commands ignored", "file", s.cfgPath, "keys", strings.Join(s.ignored, ","))
	}
}

func (s *settings) String(p *string, name, def, usage string) {
	*p = def
	s.add(name, usage, (*stringValue)(p))
}

func (s *settings) Bool(p *bool, name string, def bool, usage string) {
	*p = def
	s.add(name, usage, (*boolValue)(p))
}

func (s *settings) Int(p *int, name string, def int, usage string) {
	*p = def
	s.add(name, usage, (*intValue)(p))
}

func (s *settings) Duration(p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	s.add(name, usage, (*durationValue)(p))
}

func (s *settings) StringList(p *[]string, name, usage string) {
	s.add(name, usage, (*listValue)(p))
}

// describing maps the argument describeCommand appends to the function
// that receives the settings of the command it runs. The argument holds a
// NUL byte, which no command line can, so only that one invocation is
// described: commands running at the same time are not.
var (
	describing  sync.Map // string → func(*settings)
	describeSeq atomic.Uint64
)

var errDescribed = errors.New("settings described, command not run")

// describeCommand returns the settings of the command named by args
// ("serve", or "outbox", "stats") at their defaults, without running it; nil
// when the command has none (version, genconfig), which then only fails on
// an unexpected argument, to io.Discard.
func describeCommand(args []string) *settings {
	key := fmt.Sprintf("\x00describe-%d", describeSeq.Add(1))
	var captured *settings
	describing.Store(key, func(s *settings) {
		if captured == nil {
			captured = s
		}
	})
	defer describing.Delete(key)
	run(context.Background(), append(append([]string(nil), args...), key), io.Discard, io.Discard)
	return captured
}

// parseCommand parses a command's args as parse does and refuses
// positional arguments.
func (s *settings) parseCommand(args []string) error {
	if err := s.parse(args); err != nil {
		return err
	}
	if s.fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, s.fs.Arg(0))
	}
	return nil
}

// parseLogged parses as parseCommand does, then returns the logger logs
// configures (writing to stderr), having logged the settings the command
// ignores.
func (s *settings) parseLogged(args []string, logs *logSettings, stderr io.Writer) (*slog.Logger, error) {
	if err := s.parseCommand(args); err != nil {
		return nil, err
	}
	log, err := logs.logger(stderr)
	if err != nil {
		return nil, err
	}
	s.logIgnored(log)
	return log, nil
}

// parse applies the config file, then the environment, then the flags,
// then runs the checks.
func (s *settings) parse(args []string) error {
	if n := len(args); n > 0 {
		if f, ok := describing.Load(args[n-1]); ok {
			f.(func(*settings))(s)
			return errDescribed
		}
	}
	// Flags first, to learn --config and which flags were set explicitly.
	if err := s.fs.Parse(args); err != nil {
		return err
	}
	explicit := map[string]bool{}
	s.fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	cfgPath := *s.cfg
	if !explicit["config"] {
		cfgPath = os.Getenv("HERALD_CONFIG")
	}
	if cfgPath != "" {
		s.cfgPath = cfgPath
		if err := s.applyFile(cfgPath, explicit); err != nil {
			return err
		}
	}
	for _, st := range s.list {
		if explicit[st.name] {
			s.from[st.name] = origin{desc: "--" + st.name}
			continue
		}
		if st.flagOnly {
			continue
		}
		if v, ok := os.LookupEnv(envName(st.name)); ok {
			if err := st.value.Set(v); err != nil {
				return fmt.Errorf("config: %s=%q: %v", envName(st.name), v, err)
			}
			s.from[st.name] = origin{desc: envName(st.name)}
		}
	}
	for _, f := range s.afterParse {
		f()
	}
	for _, check := range s.checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// commentPrefix starts the config-file keys that are comments: "#" alone or
// "#<setting>" for the note on one setting. applyFile ignores them.
const commentPrefix = "#"

// configEntry is one key of a config file with the JSON its value stands
// for, and where it is: the file, and its line where the format gives one.
type configEntry struct {
	key string
	raw json.RawMessage
	at  string
}

// isYAMLConfig reports whether --config names a YAML file rather than JSON.
func isYAMLConfig(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return true
	}
	return false
}

func (s *settings) applyFile(path string, explicit map[string]bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: read %s: %w", path, err)
	}
	var entries []configEntry
	if isYAMLConfig(path) {
		entries, err = yamlConfigEntries(path, b)
	} else {
		entries, err = jsonConfigEntries(path, b)
	}
	if err != nil {
		return err
	}
	return s.applyEntries(entries, explicit)
}

// jsonConfigEntries reads a JSON config file: one object, its keys in
// sorted order.
func jsonConfigEntries(path string, b []byte) ([]configEntry, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("config: %s: not a JSON object: %v", path, err)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	entries := make([]configEntry, 0, len(keys))
	for _, k := range keys {
		entries = append(entries, configEntry{key: k, raw: raw[k], at: path})
	}
	return entries, nil
}

// applyEntries sets the settings a config file names, in the order of
// entries; the one place, for every format, where config keys meet flags.
// One file serves every command: a key of another command's settings is
// skipped (s.ignored); a key of no command's, or a flag-only one, is an
// error.
func (s *settings) applyEntries(entries []configEntry, explicit map[string]bool) error {
	known := map[string]setting{}
	for _, st := range s.list {
		known[st.name] = st
	}
	for _, e := range entries {
		k := e.key
		if strings.HasPrefix(k, commentPrefix) {
			continue // a comment, as herald genconfig writes them
		}
		st, ok := known[k]
		if !ok || st.flagOnly {
			if err := foreignKey(e, st.flagOnly); err != nil {
				return err
			}
			s.ignored = append(s.ignored, k)
			continue
		}
		if explicit[k] || os.Getenv(envName(k)) != "" {
			continue
		}
		if err := setFromJSON(st.value, e.raw); err != nil {
			return fmt.Errorf("config: %s: key %q: %v", e.at, k, err)
		}
		s.from[k] = origin{desc: fmt.Sprintf("%s key %q", e.at, k), file: true}
	}
	return nil
}

// foreignKey says why a config key the running command does not read is
// an error: a flag given per invocation (own is set when it is one of the
// running command's), or a key no command has, with the nearest one that
// exists. It returns nil for a setting of another command.
func foreignKey(e configEntry, own bool) error {
	cat := configCatalogue()
	switch {
	case own || len(cat.flagOnly[e.key]) > 0 && !cat.keys[e.key]:
		return fmt.Errorf("config: %s: key %q is a flag given per invocation (of %s), not a setting a config file holds: pass --%s on the command line",
			e.at, e.key, strings.Join(cat.flagOnly[e.key], ", "), e.key)
	case cat.keys[e.key]:
		return nil
	}
	return fmt.Errorf("config: %s: unknown key %q: no herald command has this setting; the nearest is %q (keys are flag names; herald genconfig COMMAND lists a command's)",
		e.at, e.key, nearest(e.key, cat.keys))
}

// catalogue is what every command reads from a config file.
type catalogue struct {
	keys     map[string]bool     // the config keys of some command
	flagOnly map[string][]string // flag-only name → "herald <command>"s
}

// commandWords names every command that has settings, as describeCommand
// takes them: each command, and each outbox and handlers subcommand.
func commandWords() [][]string {
	var names [][]string
	for _, c := range commands() {
		var subs []command
		switch c.name {
		case "outbox":
			subs = outboxCommands()
		case "handlers":
			subs = handlersCommands()
		}
		if subs != nil {
			for _, sub := range subs {
				names = append(names, []string{c.name, sub.name})
			}
			continue
		}
		names = append(names, []string{c.name})
	}
	return names
}

var (
	catalogueOnce sync.Once
	catalogueOf   catalogue
)

// configCatalogue collects, once, the settings of every command.
func configCatalogue() catalogue {
	catalogueOnce.Do(func() { catalogueOf = buildCatalogue() })
	return catalogueOf
}

func buildCatalogue() catalogue {
	cat := catalogue{keys: map[string]bool{}, flagOnly: map[string][]string{}}
	for _, words := range commandWords() {
		st := describeCommand(words)
		if st == nil {
			continue
		}
		for _, s := range st.list {
			if s.flagOnly {
				cat.flagOnly[s.name] = append(cat.flagOnly[s.name], "herald "+strings.Join(words, " "))
			} else {
				cat.keys[s.name] = true
			}
		}
	}
	return cat
}

// nearest is the key of keys closest to k in edit distance (the first in
// sorted order on a tie).
func nearest(k string, keys map[string]bool) string {
	names := make([]string, 0, len(keys))
	for name := range keys {
		names = append(names, name)
	}
	sort.Strings(names)
	best, bestD := "", -1
	for _, name := range names {
		if d := editDistance(k, name); bestD < 0 || d < bestD {
			best, bestD = name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func setFromJSON(v flag.Value, raw json.RawMessage) error {
	if jv, ok := v.(interface{ SetJSON(json.RawMessage) error }); ok {
		return jv.SetJSON(raw)
	}
	if lv, ok := v.(*listValue); ok {
		var items []string
		if err := json.Unmarshal(raw, &items); err == nil {
			*lv = items
			return nil
		}
	}
	var str string
	if err := json.Unmarshal(raw, &str); err == nil {
		return v.Set(str)
	}
	var any any
	if err := json.Unmarshal(raw, &any); err != nil {
		return err
	}
	switch x := any.(type) {
	case bool:
		return v.Set(strconv.FormatBool(x))
	case float64:
		return v.Set(strconv.FormatFloat(x, 'f', -1, 64))
	}
	return errors.New("want a string, number, boolean or list of strings")
}

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true or false")
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

type intValue int

func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("want an integer")
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return strconv.Itoa(int(*v)) }

// parseBytes accepts plain integers and KiB/MiB/GiB suffixes.
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(s, u.suf) {
			s, mult = strings.TrimSuffix(s, u.suf), u.m
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want an integer, optionally with KiB, MiB or GiB")
	}
	return n * mult, nil
}

type durationValue time.Duration

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 30s or 5m")
	}
	*v = durationValue(d)
	return nil
}
func (v *durationValue) String() string { return time.Duration(*v).String() }

type listValue []string

// Set accepts one value per flag use, or a comma-separated list.
func (v *listValue) Set(s string) error {
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*v = append(*v, p)
		}
	}
	return nil
}
func (v *listValue) String() string { return strings.Join(*v, ",") }

func (s *settings) Float(p *float64, name string, def float64, usage string) {
	*p = def
	s.add(name, usage, (*floatValue)(p))
}

type floatValue float64

func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("want a number")
	}
	*v = floatValue(f)
	return nil
}
func (v *floatValue) String() string { return strconv.FormatFloat(float64(*v), 'f', -1, 64) }

// Bytes is an int setting that also accepts KiB, MiB and GiB suffixes.
func (s *settings) Bytes(p *int, name string, def int, usage string) {
	*p = def
	s.add(name, usage, (*bytesValue)(p))
}

type bytesValue int

func (v *bytesValue) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	if int64(int(n)) != n {
		return fmt.Errorf("too large")
	}
	*v = bytesValue(n)
	return nil
}
func (v *bytesValue) String() string { return strconv.Itoa(int(*v)) }
