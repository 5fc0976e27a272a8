package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// commandsWithSettings lists every command and outbox subcommand that has
// settings, as the words that name it.
func commandsWithSettings(t *testing.T) [][]string {
	t.Helper()
	var names [][]string
	for _, c := range commands() {
		if c.name == "outbox" {
			for _, sub := range outboxCommands {
				names = append(names, []string{c.name, sub.name})
			}
			continue
		}
		if describeCommand([]string{c.name}) != nil {
			names = append(names, []string{c.name})
		}
	}
	if len(names) < 5 {
		t.Fatalf("only %d commands with settings: %v", len(names), names)
	}
	return names
}

// clearSettingsEnv unsets HERALD_CONFIG and the variable of every setting
// of st for the test, so only the config file speaks.
func clearSettingsEnv(t *testing.T, st *settings) {
	t.Helper()
	vars := []string{"HERALD_CONFIG"}
	for _, s := range st.list {
		vars = append(vars, envName(s.name))
	}
	for _, v := range vars {
		t.Setenv(v, "") // restores the old value after the test
		os.Unsetenv(v)
	}
}

func values(st *settings) map[string]string {
	m := map[string]string{}
	for _, s := range st.list {
		m[s.name] = s.value.String()
	}
	return m
}

// TestGenconfigEverySetting: the file names every setting once, at its
// default, with a comment key before it, and fed back with --config it
// changes nothing.
func TestGenconfigEverySetting(t *testing.T) {
	for _, words := range commandsWithSettings(t) {
		t.Run(strings.Join(words, " "), func(t *testing.T) {
			out := mustHerald(t, append([]string{"genconfig"}, words...)...)
			var file map[string]json.RawMessage
			if err := json.Unmarshal([]byte(out), &file); err != nil {
				t.Fatalf("not a JSON object: %v\n%s", err, out)
			}
			defaults := describeCommand(words)
			if _, ok := file["#"]; !ok {
				t.Error(`no "#" header key`)
			}
			for _, s := range defaults.list {
				raw, ok := file[s.name]
				if !ok {
					t.Errorf("setting %q missing", s.name)
					continue
				}
				want, _ := marshal(jsonValue(s.value))
				if string(raw) != string(want) {
					t.Errorf("%s = %s, want the default %s", s.name, raw, want)
				}
				var note string
				if err := json.Unmarshal(file["#"+s.name], &note); err != nil || !strings.Contains(note, envName(s.name)) {
					t.Errorf("%q: comment %q does not name %s (%v)", s.name, note, envName(s.name), err)
				}
			}
			if want := 1 + 2*len(defaults.list); len(file) != want {
				t.Errorf("%d keys, want %d (header, and a comment and a value per setting)", len(file), want)
			}

			path := filepath.Join(t.TempDir(), "herald.json")
			if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
				t.Fatal(err)
			}
			clearSettingsEnv(t, defaults)
			fresh := describeCommand(words)
			fresh.fs.SetOutput(new(strings.Builder))
			if err := fresh.parse([]string{"--config", path}); err != nil {
				t.Fatalf("--config of the generated file: %v", err)
			}
			got, want := values(fresh), values(defaults)
			for k := range want {
				if got[k] != want[k] {
					t.Errorf("%s: %q after --config, default %q", k, got[k], want[k])
				}
			}
		})
	}
}

// TestGenconfigRoundTrip moves every setting off its default, writes the
// values as genconfig does, and reads them back with --config.
func TestGenconfigRoundTrip(t *testing.T) {
	for _, words := range commandsWithSettings(t) {
		t.Run(strings.Join(words, " "), func(t *testing.T) {
			st := describeCommand(words)
			for _, s := range st.list {
				switch v := s.value.(type) {
				case *boolValue:
					*v = !*v
				case *intValue:
					*v += 3
				case *bytesValue:
					*v += 3 << 10
				case *floatValue:
					*v += 0.25
				case *durationValue:
					*v += durationValue(90 * time.Second)
				case *listValue:
					*v = append(*v, "acme/**", "x")
				case *stringValue:
					*v += "-changed"
				default:
					t.Fatalf("%s: value type %T: teach jsonValue and this test about it", s.name, s.value)
				}
			}
			b, err := configJSON(st, strings.Join(words, " "), true)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "herald.json")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			clearSettingsEnv(t, st)
			fresh := describeCommand(words)
			fresh.fs.SetOutput(new(strings.Builder))
			if err := fresh.parse([]string{"--config", path}); err != nil {
				t.Fatalf("--config: %v\n%s", err, b)
			}
			got, want := values(fresh), values(st)
			for k := range want {
				if got[k] != want[k] {
					t.Errorf("%s: %q read back, %q written", k, got[k], want[k])
				}
			}
		})
	}
}

func TestConfigCommentKeysIgnored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.json")
	if err := os.WriteFile(path, []byte(`{"#": "head", "#listen": "a note", "#nonesuch": 1, "listen": "127.0.0.1:1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	st := newSettings("x")
	st.fs.SetOutput(new(strings.Builder))
	var listen string
	st.String(&listen, "listen", "127.0.0.1:8080", "")
	clearSettingsEnv(t, st)
	if err := st.parse([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	if listen != "127.0.0.1:1" {
		t.Fatalf("listen %q", listen)
	}
}

func TestGenconfigArguments(t *testing.T) {
	out := mustHerald(t, "genconfig", "feed", "--comments=false")
	if strings.Contains(out, `"#`) || !strings.Contains(out, `"outbox-batch-size"`) {
		t.Fatalf("genconfig feed --comments=false:\n%s", out)
	}
	if out := mustHerald(t, "genconfig"); !strings.Contains(out, `"max-connections"`) {
		t.Fatalf("genconfig without a command is not serve's:\n%s", out)
	}
	for args, want := range map[string]string{
		"genconfig version":       "has no settings",
		"genconfig genconfig":     "has no settings",
		"genconfig nope":          "unknown command",
		"genconfig outbox":        "outbox subcommand",
		"genconfig outbox nope":   "unknown outbox subcommand",
		"genconfig serve extra":   "unexpected argument",
		"genconfig --format yaml": "want json",
	} {
		code, _, errOut := herald(t, strings.Fields(args)...)
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("herald %s: exit %d, stderr %q; want 2 and %q", args, code, errOut, want)
		}
	}
}

func TestShortDuration(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond * 500, time.Second, 90 * time.Second, time.Minute, time.Hour, 24 * time.Hour, time.Hour + time.Second, time.Hour + 10*time.Minute} {
		got := shortDuration(d)
		back, err := time.ParseDuration(got)
		if err != nil || back != d {
			t.Errorf("%v → %q → %v, %v", d, got, back, err)
		}
		if strings.HasSuffix(got, "m0s") || strings.HasSuffix(got, "h0m") {
			t.Errorf("%v → %q keeps a zero unit", d, got)
		}
	}
}
