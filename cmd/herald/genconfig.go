package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/heraldgw/herald/internal/durations"
)

// runGenconfig writes a config file holding every setting of one command
// at its default, each preceded by its note: in JSON a "#<name>" comment
// key that applyFile ignores, in YAML "# " comment lines.
func runGenconfig(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("herald genconfig", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "json", "output format: json, or yaml (--config reads a file as YAML when its name ends in .yaml or .yml)")
	comments := fs.Bool("comments", true, `precede each setting with a note documenting it: a "#<name>" key in json, "# " comment lines in yaml`)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: herald genconfig [flags] [command [subcommand]]   (default command: serve)")
		fmt.Fprintln(fs.Output(), "\nWrites every setting of the command with its default, as a file for --config.")
		fs.PrintDefaults()
	}
	// Flags may come before or after the command words.
	var words []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		words = append(words, fs.Arg(0))
		args = fs.Args()[1:]
	}
	render, ext := configJSON, "json"
	switch *format {
	case "json":
	case "yaml":
		render, ext = configYAML, "yaml"
	default:
		return fmt.Errorf("%w: --format %q: want json or yaml", errUsage, *format)
	}
	if len(words) == 0 {
		words = []string{"serve"}
	}
	if err := checkCommandWords(words); err != nil {
		return err
	}
	st := describeCommand(words)
	if st == nil {
		return fmt.Errorf("%w: herald %s has no settings", errUsage, strings.Join(words, " "))
	}
	name := strings.Join(words, " ")
	b, err := render(st, name, *comments)
	if err != nil {
		return err
	}
	if _, err := stdout.Write(b); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "herald genconfig: %d settings of `herald %s`, each at its default; use with: herald %s --config FILE.%s\n", len(st.configurable()), name, name, ext)
	return nil
}

// checkCommandWords refuses words that do not name a command (or an outbox
// subcommand), so a typo is not reported as "has no settings".
func checkCommandWords(words []string) error {
	for _, c := range commands() {
		if c.name != words[0] {
			continue
		}
		switch {
		case c.name == "genconfig":
			return fmt.Errorf("%w: herald genconfig has no settings", errUsage)
		case c.name == "outbox":
			if len(words) != 2 {
				return fmt.Errorf("%w: name an outbox subcommand, e.g. herald genconfig outbox stats", errUsage)
			}
			for _, sub := range outboxCommands() {
				if sub.name == words[1] {
					return nil
				}
			}
			return fmt.Errorf("%w: unknown outbox subcommand %q", errUsage, words[1])
		case len(words) > 1:
			return fmt.Errorf("%w: unexpected argument %q", errUsage, words[1])
		}
		return nil
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, words[0])
}

// configJSON renders the current values of st as a config file, keys in
// registration order. With comments, a "#" key heads the file and a
// "#<name>" key before each setting carries its usage and variable.
func configJSON(st *settings, name string, comments bool) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("{\n")
	field := func(k string, v any) error {
		kb, err := marshal(k)
		if err != nil {
			return err
		}
		vb, err := marshal(v)
		if err != nil {
			return fmt.Errorf("genconfig: %s: %w", k, err)
		}
		if b.Len() > 2 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, "  %s: %s", kb, vb)
		return nil
	}
	if comments {
		head := configHead(name, "keys starting with # are comments")
		if err := field(commentPrefix, head); err != nil {
			return nil, err
		}
	}
	for _, s := range st.configurable() {
		if comments {
			if err := field(commentPrefix+s.name, s.usage+" (env "+envName(s.name)+")"); err != nil {
				return nil, err
			}
		}
		if err := field(s.name, jsonValue(s.value)); err != nil {
			return nil, err
		}
	}
	b.WriteString("\n}\n")
	return b.Bytes(), nil
}

// configHead is the note that heads a generated config file.
func configHead(name, comments string) string {
	return fmt.Sprintf("herald %s settings at their defaults (herald genconfig, herald %s). Keys are flag names; %s. Precedence: flag, environment HERALD_<NAME>, this file, default. Delete what you do not change.", name, version, comments)
}

// configYAML renders the current values of st as a YAML config file, keys
// in registration order, the values those of jsonValue. With comments, "# "
// lines head the file and precede each setting with its usage and
// variable.
func configYAML(st *settings, name string, comments bool) ([]byte, error) {
	var b bytes.Buffer
	if comments {
		yamlComment(&b, strings.Fields(configHead(name, "lines starting with # are comments")))
	}
	for _, s := range st.configurable() {
		if comments {
			b.WriteString("\n")
			yamlComment(&b, append(strings.Fields(s.usage), "(env "+envName(s.name)+")"))
		}
		var one bytes.Buffer
		enc := yaml.NewEncoder(&one)
		enc.SetIndent(2)
		if err := enc.Encode(map[string]any{s.name: jsonValue(s.value)}); err != nil {
			return nil, fmt.Errorf("genconfig: %s: %w", s.name, err)
		}
		if err := enc.Close(); err != nil {
			return nil, fmt.Errorf("genconfig: %s: %w", s.name, err)
		}
		b.Write(one.Bytes())
	}
	return b.Bytes(), nil
}

// yamlComment writes words as "# " lines of at most 78 columns, but for a
// word longer than that.
func yamlComment(b *bytes.Buffer, words []string) {
	line := "#"
	for _, w := range words {
		if line != "#" && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) > 78 {
			b.WriteString(line + "\n")
			line = "#"
		}
		line += " " + w
	}
	b.WriteString(line + "\n")
}

// jsonValue is the config-file form of a setting's value: what setFromJSON
// reads back to the same value.
func jsonValue(v flag.Value) any {
	switch x := v.(type) {
	case *boolValue:
		return bool(*x)
	case *intValue:
		return int(*x)
	case *bytesValue:
		return int(*x)
	case *floatValue:
		return float64(*x)
	case *listValue:
		return append([]string{}, *x...)
	case *durationValue:
		return durations.Short(time.Duration(*x))
	case *handlersValue:
		return x.jsonValue()
	}
	return v.String()
}

// marshal is json.Marshal without HTML escaping: usage texts hold < and >.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
