package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
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
// config file, default.
type setting struct {
	name  string
	usage string
	value flag.Value
}

// settings collects the knobs of one subcommand.
type settings struct {
	fs   *flag.FlagSet
	list []setting
	cfg  *string // the --config flag
	// afterParse run once every source has been applied.
	afterParse []func()
	// alsoKnown are config-file keys that are not this command's settings
	// but are accepted and ignored: revoke reads serve's config file.
	alsoKnown map[string]bool
}

func newSettings(cmd string) *settings {
	fs := flag.NewFlagSet("herald "+cmd, flag.ContinueOnError)
	s := &settings{fs: fs}
	s.cfg = fs.String("config", "", "config file (a JSON object, or a YAML mapping when the name ends in .yaml or .yml, whose keys are these flag names; keys starting with # are comments; herald genconfig writes one); none is read unless named (env HERALD_CONFIG)")
	return s
}

func envName(flagName string) string {
	return "HERALD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (s *settings) add(name, usage string, v flag.Value) {
	s.fs.Var(v, name, usage+" (env "+envName(name)+")")
	s.list = append(s.list, setting{name: name, usage: usage, value: v})
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

// describeSettings, while describeCommand runs, receives the settings of
// the command it runs before they are parsed; parse then stops with
// errDescribed, so the command does nothing.
var (
	describeMu       sync.Mutex
	describeSettings atomic.Pointer[func(*settings)]
)

var errDescribed = errors.New("settings described, command not run")

// describeCommand returns the settings of the command named by args
// ("serve", or "outbox", "stats") at their defaults, without running it; nil
// when the command has none. The command is invoked with -h, so one that
// parses its flags without settings (version, genconfig) only prints help,
// to io.Discard.
func describeCommand(args []string) *settings {
	describeMu.Lock()
	defer describeMu.Unlock()
	var captured *settings
	capture := func(s *settings) {
		if captured == nil {
			captured = s
		}
	}
	describeSettings.Store(&capture)
	defer describeSettings.Store(nil)
	run(context.Background(), append(append([]string(nil), args...), "-h"), io.Discard, io.Discard)
	return captured
}

// parse applies the config file, then the environment, then the flags.
func (s *settings) parse(args []string) error {
	if f := describeSettings.Load(); f != nil {
		(*f)(s)
		return errDescribed
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
		if err := s.applyFile(cfgPath, explicit); err != nil {
			return err
		}
	}
	for _, st := range s.list {
		if explicit[st.name] {
			continue
		}
		if v, ok := os.LookupEnv(envName(st.name)); ok {
			if err := st.value.Set(v); err != nil {
				return fmt.Errorf("config: %s=%q: %v", envName(st.name), v, err)
			}
		}
	}
	for _, f := range s.afterParse {
		f()
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
		if !ok && s.alsoKnown[k] {
			continue // a setting of the command whose file this is
		}
		if !ok {
			return fmt.Errorf("config: %s: unknown key %q (keys are flag names, e.g. \"listen\")", e.at, k)
		}
		if explicit[k] || os.Getenv(envName(k)) != "" {
			continue
		}
		if err := setFromJSON(st.value, e.raw); err != nil {
			return fmt.Errorf("config: %s: key %q: %v", e.at, k, err)
		}
	}
	return nil
}

func setFromJSON(v flag.Value, raw json.RawMessage) error {
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
