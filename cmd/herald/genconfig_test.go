package main

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
)

// commandsWithSettings lists every command and outbox subcommand that has
// settings, as the words that name it.
func commandsWithSettings(t *testing.T) [][]string {
	t.Helper()
	var names [][]string
	for _, c := range commands() {
		if c.name == "outbox" {
			for _, sub := range outboxCommands() {
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

// values are the values of st's configurable settings (the flag-only
// ones never come from a file).
func values(st *settings) map[string]string {
	m := map[string]string{}
	for _, s := range st.configurable() {
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
			for _, s := range defaults.configurable() {
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
			if want := 1 + 2*len(defaults.configurable()); len(file) != want {
				t.Errorf("%d keys, want %d (header, and a comment and a value per setting)", len(file), want)
			}

			loadsBack(t, words, "herald.json", []byte(out), defaults)
		})
	}
}

// loadsBack writes a config file called name and checks that --config of
// it gives the command named by words exactly the values of want.
func loadsBack(t *testing.T, words []string, name string, file []byte, want *settings) {
	t.Helper()
	path := writeConfig(t, name, string(file))
	clearSettingsEnv(t, want)
	fresh := describeCommand(words)
	fresh.fs.SetOutput(new(strings.Builder))
	if err := fresh.parse([]string{"--config", path}); err != nil {
		t.Fatalf("--config of the written file: %v\n%s", err, file)
	}
	got, wantValues := values(fresh), values(want)
	for k := range wantValues {
		if got[k] != wantValues[k] {
			t.Errorf("%s: %q after --config %s, %q written", k, got[k], name, wantValues[k])
		}
	}
}

// TestGenconfigYAMLEverySetting: genconfig --format yaml names every
// setting once, in registration order, at its default, after "# " lines
// carrying its usage and variable, and fed back with --config x.yaml it
// changes nothing.
func TestGenconfigYAMLEverySetting(t *testing.T) {
	for _, words := range commandsWithSettings(t) {
		t.Run(strings.Join(words, " "), func(t *testing.T) {
			out := mustHerald(t, append([]string{"genconfig", "--format", "yaml"}, words...)...)
			defaults := describeCommand(words)
			if head := "# herald " + strings.Join(words, " ") + " settings at their defaults"; !strings.HasPrefix(out, head) {
				t.Errorf("does not start with %q:\n%s", head, out)
			}
			entries, err := yamlConfigEntries("genconfig.yaml", []byte(out))
			if err != nil {
				t.Fatalf("not a YAML config: %v\n%s", err, out)
			}
			if len(entries) != len(defaults.configurable()) {
				t.Errorf("%d keys, want one per setting, %d", len(entries), len(defaults.configurable()))
			}
			lines := strings.Split(out, "\n")
			for i, s := range defaults.configurable() {
				if i >= len(entries) || entries[i].key != s.name {
					got := "nothing"
					if i < len(entries) {
						got = strconv.Quote(entries[i].key)
					}
					t.Errorf("setting %d is %s; want %q, in registration order", i, got, s.name)
					continue
				}
				var got, want any
				wantRaw, _ := marshal(jsonValue(s.value))
				if err := json.Unmarshal(entries[i].raw, &got); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(wantRaw, &want); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %s, want the default %s", s.name, entries[i].raw, wantRaw)
				}
				at := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, s.name+":") })
				var note []string
				for j := at - 1; j >= 0 && strings.HasPrefix(lines[j], "# "); j-- {
					note = append([]string{strings.TrimPrefix(lines[j], "# ")}, note...)
				}
				wantNote := strings.Join(strings.Fields(s.usage+" (env "+envName(s.name)+")"), " ")
				if got := strings.Join(note, " "); got != wantNote {
					t.Errorf("%s: comment %q, want %q", s.name, got, wantNote)
				}
			}
			loadsBack(t, words, "herald.yaml", []byte(out), defaults)
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
				if strings.HasPrefix(s.name, "redis-sentinel-") {
					continue // they exclude --redis-cluster, turned on below
				}
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
				case *handlersValue:
					if err := v.Set(`[{"name":"billing","type":"webhook","url":"https://billing.example/hook","secret":"whsec_Nm8b7X2m0qkq3v9sQ8pZkR4y1WcT6hJd5LaE2uFgYiM=","routes":[{"kind":"integration_event","type":"invoice.*"}],"timeout":"5s"}]`); err != nil {
						t.Fatal(err)
					}
				case *stringValue:
					switch s.name { // URLs stay URLs of their kind
					case "database-url":
						*v = "postgres://herald@db.example:5432/changed"
					case "redis-url":
						*v = "redis://redis.example:6379/1"
					case "jwt-hmac-secret": // and a key stays long enough
						*v += "-changed-to-a-key-of-32-bytes-or-more"
					default:
						*v += "-changed"
					}
				default:
					t.Fatalf("%s: value type %T: teach jsonValue and this test about it", s.name, s.value)
				}
			}
			for name, render := range map[string]func(*settings, string, bool) ([]byte, error){
				"herald.json": configJSON,
				"herald.yaml": configYAML,
			} {
				for _, comments := range []bool{true, false} {
					b, err := render(st, strings.Join(words, " "), comments)
					if err != nil {
						t.Fatal(err)
					}
					loadsBack(t, words, name, b, st)
				}
			}
		})
	}
}

// TestGenconfigYAMLQuoting: strings that YAML would read as something else
// (numbers, booleans, null, comments, indicators) are written so they read
// back as the same strings.
func TestGenconfigYAMLQuoting(t *testing.T) {
	tricky := []string{"", "true", "no", "null", "~", "123", "0x1F", "1e3", ".inf", "2024-01-02", "herald:", "a: b", "# not a comment",
		"a #b", "- x", "[x]", "{x}", "*x", "&x", "!x", "%x", "@x", "`x", "'", `"`, " lead", "trail ", "two\nlines", "tab\there", "<data-dir>/x", "é…", "\\", "<<"}
	for _, v := range tricky {
		st := newSettings("x")
		var str string
		var list []string
		st.String(&str, "s", v, "a string")
		st.StringList(&list, "l", "a list")
		list = []string{v, "x"}
		b, err := configYAML(st, "x", true)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		back := newSettings("x")
		var str2 string
		var list2 []string
		back.String(&str2, "s", "default", "")
		back.StringList(&list2, "l", "")
		path := writeConfig(t, "x.yaml", string(b))
		clearSettingsEnv(t, back)
		if err := back.parse([]string{"--config", path}); err != nil {
			t.Errorf("%q: %v\n%s", v, err, b)
			continue
		}
		if str2 != v || !slices.Equal(list2, list) {
			t.Errorf("%q: read back %q and %q\n%s", v, str2, list2, b)
		}
	}
}

func TestConfigCommentKeysIgnored(t *testing.T) {
	path := writeConfig(t, "herald.json", `{"#": "head", "#listen": "a note", "#nonesuch": 1, "listen": "127.0.0.1:1"}`)
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
	if out := mustHerald(t, "genconfig", "--format", "json"); !strings.HasPrefix(out, "{") {
		t.Fatalf("genconfig --format json:\n%s", out)
	}
	if out := mustHerald(t, "genconfig", "--format=yaml", "feed", "--comments=false"); strings.Contains(out, "#") || !strings.HasPrefix(out, "data-dir: ") || !strings.Contains(out, "\noutbox-batch-size: "+strconv.Itoa(outboxfeed.DefaultBatchSize)+"\n") {
		t.Fatalf("genconfig --format=yaml feed --comments=false:\n%s", out)
	}
	if out := mustHerald(t, "genconfig", "outbox", "stats", "--format", "yaml"); !strings.HasPrefix(out, "# herald outbox stats settings") {
		t.Fatalf("genconfig outbox stats --format yaml:\n%s", out)
	}
	for args, want := range map[string]string{
		"genconfig version":       "has no settings",
		"genconfig genconfig":     "has no settings",
		"genconfig nope":          "unknown command",
		"genconfig outbox":        "outbox subcommand",
		"genconfig outbox nope":   "unknown outbox subcommand",
		"genconfig serve extra":   "unexpected argument",
		"genconfig --format toml": "want json or yaml",
		"genconfig --format YAML": "want json or yaml",
	} {
		code, _, errOut := herald(t, strings.Fields(args)...)
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("herald %s: exit %d, stderr %q; want 2 and %q", args, code, errOut, want)
		}
	}
}
