package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// writeConfig writes body to a file called name in a fresh directory.
func writeConfig(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveWith parses `herald serve` settings with args, the environment left
// to the caller, and returns them.
func serveWith(t *testing.T, args ...string) (*settings, error) {
	t.Helper()
	st := describeCommand([]string{"serve"})
	if st == nil {
		t.Fatal("herald serve has no settings")
	}
	st.fs.SetOutput(new(strings.Builder))
	return st, st.parse(args)
}

// kinds is a settings set with one setting of every value kind.
type kinds struct {
	st        *settings
	listen    string
	maxc      int
	sharded   bool
	hb        time.Duration
	queue     int
	msgSize   int
	subs      []string
	origins   []string
	ratio     float64
	data      string
	keyPrefix string
}

func newKinds() *kinds {
	k := &kinds{st: newSettings("x")}
	k.st.fs.SetOutput(new(strings.Builder))
	k.st.String(&k.listen, "listen", "127.0.0.1:8080", "")
	k.st.Int(&k.maxc, "max-connections", 10, "")
	k.st.Bool(&k.sharded, "redis-sharded", false, "")
	k.st.Duration(&k.hb, "heartbeat-interval", time.Second, "")
	k.st.Bytes(&k.queue, "queue-max-bytes", 1<<20, "")
	k.st.Bytes(&k.msgSize, "max-message-size", 64<<10, "")
	k.st.StringList(&k.subs, "subscribe", "")
	k.st.StringList(&k.origins, "allowed-origins", "")
	k.st.Float(&k.ratio, "connect-attempts-per-ip", 20, "")
	k.st.String(&k.data, "data", "", "")
	k.st.String(&k.keyPrefix, "redis-key-prefix", "herald:", "")
	return k
}

const kindsYAML = `# every kind of value
listen: 0.0.0.0:9090
max-connections: 7
redis-sharded: true
heartbeat-interval: 3s
queue-max-bytes: 64KiB
max-message-size: 2048
subscribe:
  - a/*
  - "b/**"
allowed-origins: [https://a.example, "https://*.b.example"]
connect-attempts-per-ip: 0.5
data: '{"a": 1}'
redis-key-prefix: "app:"
"#listen": a comment key, as in JSON
`

const kindsJSON = `{
  "listen": "0.0.0.0:9090",
  "max-connections": 7,
  "redis-sharded": true,
  "heartbeat-interval": "3s",
  "queue-max-bytes": "64KiB",
  "max-message-size": 2048,
  "subscribe": ["a/*", "b/**"],
  "allowed-origins": ["https://a.example", "https://*.b.example"],
  "connect-attempts-per-ip": 0.5,
  "data": "{\"a\": 1}",
  "redis-key-prefix": "app:",
  "#listen": "a comment key, as in JSON"
}`

// TestYAMLConfigEveryKind: a YAML file sets a value of every kind, and
// the same settings as the equivalent JSON file.
func TestYAMLConfigEveryKind(t *testing.T) {
	y, j := newKinds(), newKinds()
	clearSettingsEnv(t, y.st)
	if err := y.st.parse([]string{"--config", writeConfig(t, "herald.yaml", kindsYAML)}); err != nil {
		t.Fatal(err)
	}
	if err := j.st.parse([]string{"--config", writeConfig(t, "herald.json", kindsJSON)}); err != nil {
		t.Fatal(err)
	}
	if y.listen != "0.0.0.0:9090" || y.maxc != 7 || !y.sharded || y.hb != 3*time.Second ||
		y.queue != 64<<10 || y.msgSize != 2048 || y.ratio != 0.5 || y.data != `{"a": 1}` || y.keyPrefix != "app:" ||
		!reflect.DeepEqual(y.subs, []string{"a/*", "b/**"}) ||
		!reflect.DeepEqual(y.origins, []string{"https://a.example", "https://*.b.example"}) {
		t.Fatalf("YAML file not applied: %v", values(y.st))
	}
	if got, want := values(y.st), values(j.st); !reflect.DeepEqual(got, want) {
		t.Fatalf("YAML and JSON files differ:\nyaml %v\njson %v", got, want)
	}
}

// TestYAMLConfigServe: `herald serve` reads a YAML file to the same
// settings as the JSON one.
func TestYAMLConfigServe(t *testing.T) {
	st := describeCommand([]string{"serve"})
	clearSettingsEnv(t, st)
	yamlFile := writeConfig(t, "herald.yml", `
listen: 127.0.0.1:9999
max-connections: 20000
history-ttl: 2h
queue-max-bytes: 2MiB
redis-sharded: true
connect-attempts-per-ip: -1
trusted-proxies:
  - 10.0.0.0/8
  - 127.0.0.1/32
`)
	jsonFile := writeConfig(t, "herald.json", `{"listen": "127.0.0.1:9999", "max-connections": 20000, "history-ttl": "2h",
		"queue-max-bytes": "2MiB", "redis-sharded": true, "connect-attempts-per-ip": -1, "trusted-proxies": ["10.0.0.0/8", "127.0.0.1/32"]}`)
	fromYAML, err := serveWith(t, "--config", yamlFile)
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := serveWith(t, "--config", jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	got, want := values(fromYAML), values(fromJSON)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("YAML and JSON files differ:\nyaml %v\njson %v", got, want)
	}
	for k, v := range map[string]string{"max-connections": "20000", "history-ttl": "2h0m0s", "queue-max-bytes": "2097152", "trusted-proxies": "10.0.0.0/8,127.0.0.1/32"} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

// TestSettingsDocConfigExamples: the JSON and the YAML example in
// docs/settings.md are valid config files of herald serve with the same
// settings.
func TestSettingsDocConfigExamples(t *testing.T) {
	raw, err := os.ReadFile(settingsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	block := func(lang string) string {
		_, rest, ok := strings.Cut(doc, "\n```"+lang+"\n")
		body, _, closed := strings.Cut(rest, "\n```\n")
		if !ok || !closed {
			t.Fatalf("%s has no ```%s example", settingsDoc, lang)
		}
		return body + "\n"
	}
	st := describeCommand([]string{"serve"})
	clearSettingsEnv(t, st)
	fromJSON, err := serveWith(t, "--config", writeConfig(t, "herald.json", block("json")))
	if err != nil {
		t.Fatalf("the JSON example: %v", err)
	}
	fromYAML, err := serveWith(t, "--config", writeConfig(t, "herald.yaml", block("yaml")))
	if err != nil {
		t.Fatalf("the YAML example: %v", err)
	}
	got, want := values(fromYAML), values(fromJSON)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the examples differ:\nyaml %v\njson %v", got, want)
	}
	if defaults := values(st); reflect.DeepEqual(got, defaults) {
		t.Fatal("the examples set nothing")
	}
}

// TestYAMLConfigPrecedence: flag over environment over YAML file over
// default, as for JSON; HERALD_CONFIG may name the YAML file.
func TestYAMLConfigPrecedence(t *testing.T) {
	cfg := writeConfig(t, "herald.yaml", "listen: 127.0.0.1:1\nmax-connections: 7\nheartbeat-interval: 3s\nsubscribe: [a/*, b/**]\n")
	k := newKinds()
	clearSettingsEnv(t, k.st)
	if err := k.st.parse([]string{"--config", cfg}); err != nil {
		t.Fatal(err)
	}
	if k.listen != "127.0.0.1:1" || k.maxc != 7 || k.hb != 3*time.Second || strings.Join(k.subs, ",") != "a/*,b/**" {
		t.Fatalf("file not applied: %v", values(k.st))
	}

	t.Setenv("HERALD_MAX_CONNECTIONS", "9")
	t.Setenv("HERALD_SUBSCRIBE", "c/*")
	k = newKinds()
	if err := k.st.parse([]string{"--config", cfg, "--listen", "127.0.0.1:2", "--heartbeat-interval", "4s"}); err != nil {
		t.Fatal(err)
	}
	if k.listen != "127.0.0.1:2" || k.hb != 4*time.Second || k.maxc != 9 || strings.Join(k.subs, ",") != "c/*" {
		t.Fatalf("want flag over file and env over file: %v", values(k.st))
	}

	t.Setenv("HERALD_CONFIG", cfg)
	k = newKinds()
	if err := k.st.parse(nil); err != nil {
		t.Fatal(err)
	}
	if k.listen != "127.0.0.1:1" || k.maxc != 9 || k.hb != 3*time.Second {
		t.Fatalf("HERALD_CONFIG naming a YAML file: %v", values(k.st))
	}
}

// TestYAMLConfigRevokeReadsServeFile: herald revoke accepts the YAML
// config of herald serve, as it does the JSON one, and takes the settings
// they share from it.
func TestYAMLConfigRevokeReadsServeFile(t *testing.T) {
	serveFile := mustHerald(t, "genconfig", "--format", "yaml", "serve")
	serveFile = strings.Replace(serveFile, "\ndata-dir: ./herald-data\n", "\ndata-dir: /srv/herald\n", 1)
	path := writeConfig(t, "serve.yaml", serveFile)
	st := describeCommand([]string{"revoke"})
	clearSettingsEnv(t, st)
	st.fs.SetOutput(new(strings.Builder))
	if err := st.parse([]string{"--config", path}); err != nil {
		t.Fatalf("revoke --config serve.yaml: %v", err)
	}
	if got := values(st)["data-dir"]; got != "/srv/herald" {
		t.Fatalf("data-dir %q, want the file's /srv/herald", got)
	}
}

// TestYAMLConfigFormatByName: .yaml and .yml, in any case, are YAML; any
// other name is JSON, as before.
func TestYAMLConfigFormatByName(t *testing.T) {
	k := newKinds()
	clearSettingsEnv(t, k.st)
	for _, name := range []string{"a.yaml", "b.yml", "C.YAML", "d.Yml"} {
		k := newKinds()
		if err := k.st.parse([]string{"--config", writeConfig(t, name, "max-connections: 5\n")}); err != nil || k.maxc != 5 {
			t.Errorf("%s: max-connections %d, %v", name, k.maxc, err)
		}
	}
	for _, name := range []string{"herald.json", "herald.conf", "yaml", "x.yaml.json"} {
		k := newKinds()
		err := k.st.parse([]string{"--config", writeConfig(t, name, "max-connections: 5\n")})
		if err == nil || !strings.Contains(err.Error(), "not a JSON object") {
			t.Errorf("%s read as YAML: %v", name, err)
		}
	}
}

// TestYAMLConfigEmpty: a file with nothing, only comments, or a null
// document sets nothing, as JSON null does.
func TestYAMLConfigEmpty(t *testing.T) {
	for _, body := range []string{"", "\n", "# every line\n# commented out\n", "~\n", "---\n", "null\n", "{}\n"} {
		k := newKinds()
		clearSettingsEnv(t, k.st)
		if err := k.st.parse([]string{"--config", writeConfig(t, "herald.yaml", body)}); err != nil {
			t.Errorf("%q: %v", body, err)
			continue
		}
		if k.listen != "127.0.0.1:8080" || k.maxc != 10 {
			t.Errorf("%q changed settings: %v", body, values(k.st))
		}
	}
}

// TestYAMLConfigErrors: every refusal names the file, the line and, for a
// value, the key.
func TestYAMLConfigErrors(t *testing.T) {
	st := describeCommand([]string{"serve"})
	clearSettingsEnv(t, st)
	cases := []struct {
		name, body string
		want       []string
	}{
		{"unknown key", "listen: 127.0.0.1:1\nlisen: x\n", []string{":2: ", `unknown key "lisen"`, `the nearest is "listen"`}},
		{"int", "max-connections: many\n", []string{":1: ", `key "max-connections"`, "want an integer"}},
		{"fraction for int", "history-size: 1.5\n", []string{":1: ", `key "history-size"`, "want an integer"}},
		{"bool", "\nredis-sharded: maybe\n", []string{":2: ", `key "redis-sharded"`, "want true or false"}},
		{"yes is no bool", "redis-sharded: yes\n", []string{`key "redis-sharded"`, "want true or false"}},
		{"duration", "heartbeat-interval: 5\n", []string{`key "heartbeat-interval"`, "want a duration"}},
		{"bytes", "queue-max-bytes: 2XiB\n", []string{`key "queue-max-bytes"`, "KiB, MiB or GiB"}},
		{"float", "connect-attempts-per-ip: lots\n", []string{`key "connect-attempts-per-ip"`, "want a number"}},
		{"list for a string", "data-dir: [a, b]\n", []string{":1: ", `key "data-dir"`, "want a string, number, boolean or list of strings"}},
		{"mapping for a list", "allowed-origins:\n  a: 1\n", []string{":1: ", `key "allowed-origins"`, "want a string, number, boolean or list of strings"}},
		{"numbers for a list", "allowed-origins: [1, 2]\n", []string{`key "allowed-origins"`, "want a string, number, boolean or list of strings"}},
		{"int key", "listen: x\n123: x\n", []string{":2: ", "key 123 is not a string", "!!int"}},
		{"bool key", "true: x\n", []string{":1: ", "key true is not a string", "!!bool"}},
		{"null key", "~: x\n", []string{"key ~ is not a string", "!!null"}},
		{"float key", "1.5: x\n", []string{"key 1.5 is not a string", "!!float"}},
		{"sequence key", "? [a, b]\n: x\n", []string{":1: ", "a key that is a sequence"}},
		{"mapping key", "? {a: 1}\n: x\n", []string{"a key that is a mapping"}},
		{"non-string key inside", "allowed-origins:\n  - {1: x}\n", []string{":2: ", `key "allowed-origins"`, "key 1 is not a string"}},
		{"syntax: unterminated", "listen: \"127.0.0.1:1\nmax-connections: 3\n", []string{"not valid YAML", "line"}},
		{"syntax: tab indent", "allowed-origins:\n\t- a\n", []string{"not valid YAML", "line 2"}},
		{"syntax: bad mapping", "max-connections: 1\nlisten: a: b\n", []string{"not valid YAML", "line 2"}},
		{"syntax: in second document", "listen: a\n---\n[x\n", []string{"not valid YAML"}},
		{"top-level sequence", "- listen\n- 127.0.0.1:1\n", []string{":1: ", "not a YAML mapping"}},
		{"top-level string", "listen\n", []string{"not a YAML mapping"}},
		{"alias", "data-dir: &d /srv/herald\ntypes: *d\n", []string{":1: ", "anchors and aliases"}},
		{"alias in a list", "allowed-origins:\n  - a\n  - *x\n", []string{"not valid YAML", "unknown anchor"}},
		{"merge key", "base: &b {listen: x}\n<<: *b\n", []string{"anchors and aliases"}},
		{"anchored document", "&a {listen: x}\n", []string{":1: ", "anchors and aliases"}},
		{"merge key alone", "<<: {listen: x}\n", []string{":1: ", `merge key "<<"`}},
		{"repeated key", "listen: a\nmax-connections: 1\nlisten: b\n", []string{":3: ", `key "listen" repeated (first on line 1)`}},
		{"two documents", "listen: a\n---\nlisten: b\n", []string{":2: ", "a second YAML document"}},
		{"infinity", "connect-attempts-per-ip: .inf\n", []string{":1: ", `key "connect-attempts-per-ip"`, ".inf has no JSON equivalent"}},
		{"nan", "connect-attempts-per-ip: .nan\n", []string{".nan has no JSON equivalent"}},
		{"custom tag", "data-dir: !env HOME\n", []string{":1: ", `key "data-dir"`, "tag !env has no JSON equivalent"}},
		{"binary", "data-dir: !!binary aGVsbG8=\n", []string{"tag !!binary has no JSON equivalent"}},
		{"set", "allowed-origins: !!set {a, b}\n", []string{"!!set has no JSON equivalent"}},
		{"bad explicit int", "max-connections: !!int seven\n", []string{":1: ", `key "max-connections"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeConfig(t, "herald.yaml", c.body)
			_, err := serveWith(t, "--config", path)
			if err == nil {
				t.Fatalf("%q accepted", c.body)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "config: "+path) {
				t.Errorf("%q: error %q does not start by naming the file", c.body, msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q: error %q does not mention %q", c.body, msg, w)
				}
			}
		})
	}
}

// TestYAMLConfigErrorsAsJSON: a bad value is reported in the words the
// JSON file gets, with the line added.
func TestYAMLConfigErrorsAsJSON(t *testing.T) {
	st := describeCommand([]string{"serve"})
	clearSettingsEnv(t, st)
	for _, c := range []struct{ yaml, json string }{
		{"max-connections: many", `{"max-connections": "many"}`},
		{"max-connections: 1.5", `{"max-connections": 1.5}`},
		{"heartbeat-interval: 5", `{"heartbeat-interval": 5}`},
		{"redis-sharded: 2", `{"redis-sharded": 2}`},
		{"queue-max-bytes: 1.5MiB", `{"queue-max-bytes": "1.5MiB"}`},
		{"data-dir: {a: b}", `{"data-dir": {"a": "b"}}`},
		{"allowed-origins: [true]", `{"allowed-origins": [true]}`},
		{"redis-sharded: ~", `{"redis-sharded": null}`},
		{"nonesuch: 1", `{"nonesuch": 1}`},
	} {
		yamlPath := writeConfig(t, "herald.yaml", c.yaml+"\n")
		jsonPath := writeConfig(t, "herald.json", c.json)
		_, yerr := serveWith(t, "--config", yamlPath)
		_, jerr := serveWith(t, "--config", jsonPath)
		if yerr == nil || jerr == nil {
			t.Errorf("%q: %v; %q: %v", c.yaml, yerr, c.json, jerr)
			continue
		}
		want := strings.Replace(jerr.Error(), jsonPath, yamlPath+":1", 1)
		if yerr.Error() != want {
			t.Errorf("%q: %q\nJSON %q: %q", c.yaml, yerr, c.json, jerr)
		}
	}
}

// TestYAMLConfigValuesAsJSON: YAML scalars stand for the JSON value they
// read as.
func TestYAMLConfigValuesAsJSON(t *testing.T) {
	for yamlText, want := range map[string]string{
		"k: plain":                `"plain"`,
		"k: 'true'":               `"true"`,
		"k: true":                 `true`,
		"k: 0x1F":                 `31`,
		"k: 0o17":                 `15`,
		"k: -12":                  `-12`,
		"k: 18446744073709551615": `18446744073709551615`,
		"k: 1e3":                  `1000`,
		"k: 0.25":                 `0.25`,
		"k: ~":                    `null`,
		"k:":                      `null`,
		"k: 2024-01-02":           `"2024-01-02"`,
		"k: !!str 12":             `"12"`,
		"k: [a, 1, [b]]":          `["a",1,["b"]]`,
		"k: {a: 1}":               `{"a":1}`,
		"k: |\n  two\n  lines":    `"two\nlines"`,
		"k: 5m":                   `"5m"`,
		"k: 64KiB":                `"64KiB"`,
	} {
		entries, err := yamlConfigEntries("t.yaml", []byte(yamlText))
		if err != nil || len(entries) != 1 {
			t.Errorf("%q: %v, %v", yamlText, entries, err)
			continue
		}
		if string(entries[0].raw) != want {
			t.Errorf("%q: %s, want %s", yamlText, entries[0].raw, want)
		}
	}
}

// FuzzYAMLConfig feeds arbitrary bytes to the YAML config reader: it never
// panics, and what it accepts is JSON that applyEntries takes or refuses
// with an error.
func FuzzYAMLConfig(f *testing.F) {
	for _, seed := range []string{
		kindsYAML,
		"",
		"listen: 127.0.0.1:1\n",
		"subscribe: [a/*, b/**]\n",
		"? [a]\n: b\n",
		"a: &x 1\nb: *x\n",
		"<<: {a: 1}\n",
		"a: !!binary aGVsbG8=\n",
		"a: .inf\n",
		"- 1\n- 2\n",
		"a: 1\n---\nb: 2\n",
		"a: {b: {c: [d, {e: f}]}}\n",
		"a: 99999999999999999999999999\n",
		"a: !!int 99999999999999999999999999\n",
		"a: !!float x\n",
		"a: !!timestamp x\n",
		"\"#a\": x\n",
		"a: \"\\xff\"\n",
		"{a: [}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := yamlConfigEntries("fuzz.yaml", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config: fuzz.yaml") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, e := range entries {
			if !json.Valid(e.raw) {
				t.Fatalf("key %q: %q is not JSON", e.key, e.raw)
			}
			if !strings.HasPrefix(e.at, "fuzz.yaml:") {
				t.Fatalf("key %q at %q", e.key, e.at)
			}
		}
		k := newKinds()
		if err := k.st.applyEntries(entries, map[string]bool{}); err != nil && !strings.HasPrefix(err.Error(), "config: fuzz.yaml:") {
			t.Fatalf("error %q does not name the file and line", err)
		}
	})
}
