package main

import (
	"encoding/json"
	"strings"
	"testing"
)

const testCatalogue = `{
  "order.updated": {"versions": [1, 2]},
  "invoice.paid": {"description": "an invoice was paid in full",
    "kind": "integration_event", "direction": "published", "trust": "internal", "handlers": ["billing"],
    "versions": {"1": {}, "2": {"schema": {"type": "object", "required": ["invoice_id"]}}}}
}`

func writeCatalogue(t *testing.T, body string) string {
	t.Helper()
	return writeConfig(t, "types.json", body)
}

// TestTypesPrintsTheCatalogue: `herald types` prints each (type, version)
// with what the catalogue says of it, as a table or JSON; mistakes are
// refused with the reason.
func TestTypesPrintsTheCatalogue(t *testing.T) {
	path := writeCatalogue(t, testCatalogue)
	out := mustHerald(t, "types", "--types", path)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "TYPE") ||
		strings.Join(strings.Fields(lines[2]), " ") != "invoice.paid 2 integration_event published internal billing yes an invoice was paid in full" ||
		strings.Join(strings.Fields(lines[3]), " ") != "order.updated 1 - - - - -" {
		t.Fatalf("table:\n%s", out)
	}
	var entries []catalogueEntry
	if err := json.Unmarshal([]byte(mustHerald(t, "types", "--types", path, "--json")), &entries); err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 || entries[1].Type != "invoice.paid" || entries[1].Version != 2 || entries[1].Trust != "internal" ||
		!strings.Contains(string(entries[1].Schema), `"invoice_id"`) || entries[0].Schema != nil {
		t.Fatalf("json: %+v", entries)
	}
	if out := mustHerald(t, "types"); !strings.Contains(out, "no catalogue") {
		t.Fatalf("without a catalogue: %q", out)
	}
	bad := writeCatalogue(t, `{"invoice.paid": {"versions": [1], "kind": "integration_event"}}`)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"types", "--types", bad}, 1, `type "invoice.paid": version 1: an integration_event declares its "direction" and its "trust"`},
		{[]string{"types", "--types", path, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"types", "--type", "a"}, 2, "flags of herald types check"},
		{[]string{"types", "check", "--type", "a"}, 2, "check needs --type T and --version N"},
		{[]string{"types", "check", "--types", path, "--type", "invoice.paid", "--version", "3"}, 1,
			"invoice.paid v3: the catalogue " + path + " does not list it"},
	} {
		code, _, errOut := herald(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("herald %s: exit %d, %q; want exit %d with %q", strings.Join(c.args, " "), code, errOut, c.code, c.want)
		}
	}
}

// TestTypesCheckGatesWriters: `herald types check` passes only when every
// live Worker reads the (type, version): before any Worker runs it fails,
// with a Worker reading only v1 running it passes v1 and fails v2 naming
// that Worker, and once the Worker stopped it fails again. On both stores.
func TestTypesCheckGatesWriters(t *testing.T) {
	for _, sc := range storeCases() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			dbURL, _, db := sc.migrated(t)
			check := func(version string, more ...string) (int, string) {
				t.Helper()
				code, _, errOut := herald(t, append(append([]string{"types", "check", "--type", "order.updated", "--version", version}, db...), more...)...)
				return code, errOut
			}
			if code, errOut := check("1"); code != 1 || !strings.Contains(errOut, "order.updated v1: no live Worker at all") {
				t.Fatalf("before any Worker: exit %d, %q", code, errOut)
			}
			billing := writeCatalogue(t, `{"order.updated": {"versions": [1, 2], "handlers": ["billing"]}}`)
			runFeedUntil(t, dbURL, `{"order.updated": {"versions": [1]}}`, "the Worker reading v1", func() bool {
				if code, _ := check("1"); code != 0 {
					return false
				}
				code, errOut := check("2")
				if code != 1 || !strings.Contains(errOut, "order.updated v2: 1 of the live Workers cannot read it: realtime/") ||
					!strings.Contains(errOut, "readers before writers") {
					t.Fatalf("v2 with a Worker reading v1 only: exit %d, %q", code, errOut)
				}
				if code, errOut := check("2", "--types", billing); code != 1 || !strings.Contains(errOut, "no live Worker of handler billing") {
					t.Fatalf("v2 routed to billing: exit %d, %q", code, errOut)
				}
				return true
			})
			if code, errOut := check("1"); code != 1 || !strings.Contains(errOut, "no live Worker at all") {
				t.Fatalf("after the Worker stopped: exit %d, %q", code, errOut)
			}
			runFeedUntil(t, dbURL, `{"order.updated": {"versions": [1, 2]}}`, "the Worker reading v2", func() bool {
				code, out, _ := herald(t, append([]string{"types", "check", "--type", "order.updated", "--version", "2"}, db...)...)
				if code == 0 && !strings.Contains(out, "order.updated v2: read by all 1 live Workers of every handler") {
					t.Fatalf("v2 passes: %q", out)
				}
				return code == 0
			})
		})
	}
}

// TestTypesNamingUnknownHandlerRefused: a catalogue that routes a type to
// a handler the config does not have stops serve and feed at start.
func TestTypesNamingUnknownHandlerRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeCatalogue(t, testCatalogue)
	hooks := `[{"name":"shipping","type":"webhook","url":"https://shipping.example/h","secret":"` + testWebhookSecret + `"}]`
	for _, args := range [][]string{
		{"serve", "--listen", "127.0.0.1:0", "--jwt-hmac-secret", testSecret},
		{"feed", "--listen", ""},
		{"feed", "--listen", "", "--handlers", hooks},
	} {
		args = append(args, "--types", path, "--data-dir", dir, "--log-level", "error")
		code, _, errOut := herald(t, args...)
		want := `config: --types: outboxfeed: invalid type registry: invoice.paid v1 names handler "billing"`
		if code == 0 || !strings.Contains(errOut, want) || !strings.Contains(errOut, "which is not configured") {
			t.Errorf("herald %s: exit %d, %q; want %q", strings.Join(args, " "), code, errOut, want)
		}
	}
}
