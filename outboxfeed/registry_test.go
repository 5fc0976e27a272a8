package outboxfeed

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const catalogue = `{
  "#": "the catalogue of the tests",
  "order.updated": {"versions": [1, 2]},
  "invoice.paid": {
    "description": "an invoice was paid in full",
    "kind": "integration_event", "direction": "published", "trust": "internal",
    "handlers": ["billing", "realtime"],
    "versions": {
      "1": {},
      "2": {"schema": {"type": "object", "required": ["invoice_id", "amount"],
        "properties": {"invoice_id": {"type": "string"}, "amount": {"type": "integer", "minimum": 0}}}},
      "3": {"trust": "partner", "handlers": ["billing"], "#note": "from the partner's ledger"}
    }
  },
  "mail.send": {"kind": "provider_side_effect", "versions": [1],
    "schemas": {"1": {"type": "object", "required": ["to"]}}}
}`

func TestCatalogueEntries(t *testing.T) {
	r, err := ParseRegistry([]byte(catalogue))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range r.Entries() {
		got = append(got, e.Type+"/"+string(rune('0'+e.Version))+"/"+e.Kind+"/"+string(e.Direction)+"/"+string(e.Trust)+"/"+
			strings.Join(e.Handlers, "+")+"/"+boolString(e.Schema != nil))
	}
	want := []string{
		"invoice.paid/1/integration_event/published/internal/billing+realtime/no",
		"invoice.paid/2/integration_event/published/internal/billing+realtime/schema",
		"invoice.paid/3/integration_event/published/partner/billing/no",
		"mail.send/1/provider_side_effect///" + "/schema",
		"order.updated/1/////no",
		"order.updated/2/////no",
	}
	if !slices.Equal(got, want) {
		t.Errorf("entries:\n got %q\nwant %q", got, want)
	}
	if e, ok := r.Entry("invoice.paid", 1); !ok || e.Description != "an invoice was paid in full" {
		t.Errorf("Entry(invoice.paid, 1) = %+v, %v", e, ok)
	}
	if _, ok := r.Entry("invoice.paid", 4); ok {
		t.Error("Entry(invoice.paid, 4) found")
	}
	reads := r.Reads()
	if len(reads) != 6 || reads[0] != (TypeVersion{"invoice.paid", 1}) || reads[5] != (TypeVersion{"order.updated", 2}) {
		t.Errorf("Reads = %v", reads)
	}
	var none *Registry
	if got := none.Reads(); len(got) != 1 || got[0] != AnyType {
		t.Errorf("nil Reads = %v", got)
	}
	if err := r.CheckHandlers([]string{"realtime", "billing"}); err != nil {
		t.Errorf("CheckHandlers: %v", err)
	}
	err = r.CheckHandlers([]string{"realtime"})
	if !errors.Is(err, ErrInvalidRegistry) || !strings.Contains(err.Error(), `invoice.paid v3 names handler "billing"`) {
		t.Errorf("CheckHandlers without billing = %v", err)
	}
}

func boolString(schema bool) string {
	if schema {
		return "schema"
	}
	return "no"
}

func TestCatalogueCheck(t *testing.T) {
	r, err := ParseRegistry([]byte(catalogue))
	if err != nil {
		t.Fatal(err)
	}
	rec := func(typ string, v int, kind, payload string) *Record {
		return &Record{ID: "id", TenantID: "acme", Channel: "billing/1", Type: typ, SchemaVersion: v, Kind: kind,
			Payload: json.RawMessage(payload)}
	}
	for _, c := range []struct {
		name string
		rec  *Record
		want string // "" accepted, else a part of the dead-letter reason
	}{
		{"no schema", rec("order.updated", 1, "", `{"x": 1}`), ""},
		{"valid", rec("invoice.paid", 2, "integration_event", `{"invoice_id": "in_1", "amount": 5}`), ""},
		{"missing member", rec("invoice.paid", 2, "integration_event", `{"invoice_id": "in_1"}`),
			"payload fails the schema of invoice.paid v2: at '': missing property 'amount'"},
		{"wrong type", rec("invoice.paid", 2, "integration_event", `{"invoice_id": 7, "amount": 5}`), "invoice_id"},
		{"below minimum", rec("invoice.paid", 2, "integration_event", `{"invoice_id": "a", "amount": -1}`), "minimum"},
		{"wrong kind", rec("invoice.paid", 1, "notification", `{}`),
			"kind notification does not match the catalogue's integration_event for invoice.paid v1"},
		{"no kind is notification", rec("mail.send", 1, "", `{"to": "a@b"}`), "kind notification does not match"},
		{"schemas member", rec("mail.send", 1, "provider_side_effect", `{}`), "payload fails the schema of mail.send v1"},
		{"not JSON", rec("invoice.paid", 2, "integration_event", `{"invoice_id": `), "payload is not decodable JSON"},
		{"unknown version", rec("invoice.paid", 9, "integration_event", `{}`), "no reader for invoice.paid v9"},
	} {
		err := r.Check(c.rec)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: a reason of several lines: %q", c.name, err)
		}
		// The Worker's path: every handler's records go through toMessage.
		if _, err2 := toMessage(c.rec, r); (err == nil) != (err2 == nil) {
			t.Errorf("%s: toMessage = %v, Check = %v", c.name, err2, err)
		}
	}
}

// TestCatalogueRefusals: each mistake is refused with an error naming the
// type, the version and the member at fault.
func TestCatalogueRefusals(t *testing.T) {
	// A schema file that exists: a $ref to it is refused all the same.
	schemaFile := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(schemaFile, []byte(`{"type": "string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ in, want string }{
		{``, "want a JSON object of types"},
		{`null`, "want a JSON object of types"},
		{`[]`, "want a JSON object of types"},
		{`{"Order": {"versions": [1]}}`, `type "Order"`},
		{`{"a": null}`, `type "a": want a JSON object`},
		{`{"a": 1}`, `type "a": want a JSON object`},
		{`{"a": {}}`, `"versions" must list at least one`},
		{`{"a": {"versions": null}}`, `"versions" must list at least one`},
		{`{"a": {"versions": []}}`, `"versions" must list at least one`},
		{`{"a": {"versions": {}}}`, `"versions" must list at least one`},
		{`{"a": {"versions": [0]}}`, "version 0: must be ≥ 1"},
		{`{"a": {"versions": [1.5]}}`, `"versions": want a list of integers`},
		{`{"a": {"versions": "1"}}`, `"versions": want a list of integers`},
		{`{"a": {"versions": {"01": {}}}}`, `key "01": want a version number`},
		{`{"a": {"versions": {"x": {}}}}`, `key "x": want a version number`},
		{`{"a": {"versions": {"-1": {}}}}`, "version -1: must be ≥ 1"},
		{`{"a": {"versions": {"1": []}}}`, `version 1: want a JSON object`},
		{`{"a": {"versions": [1], "kinds": "x"}}`, `unknown member "kinds"`},
		{`{"a": {"versions": {"1": {"schemas": {}}}}}`, `version 1: unknown member "schemas"`},
		{`{"a": {"versions": [1], "kind": "event"}}`, `"kind" "event": want one of notification`},
		{`{"a": {"versions": [1], "kind": 3}}`, `"kind": want a string`},
		{`{"a": {"versions": [1], "direction": "out"}}`, `"direction" "out": want published or consumed`},
		{`{"a": {"versions": [1], "trust": "high"}}`, `"trust" "high": want internal, partner or external`},
		{`{"a": {"versions": [1], "kind": "integration_event"}}`, `an integration_event declares its "direction" and its "trust"`},
		{`{"a": {"versions": [1], "kind": "integration_event", "direction": "published"}}`, `declares its "direction" and its "trust"`},
		{`{"a": {"versions": [1], "handlers": "billing"}}`, `"handlers": want a list of handler names`},
		{`{"a": {"versions": [1], "handlers": ["Billing"]}}`, `"handlers": `},
		{`{"a": {"versions": [1], "handlers": ["b", "b"]}}`, `"b" listed twice`},
		{`{"a": {"versions": {"1": {"schema": {"type": "thing"}}}}}`, `version 1: "schema": `},
		{`{"a": {"versions": {"1": {"schema": {"$ref": "https://example.com/s.json"}}}}}`, `version 1: "schema": `},
		{`{"a": {"versions": {"1": {"schema": {"$ref": "/etc/passwd"}}}}}`, `version 1: "schema": `},
		{`{"a": {"versions": {"1": {"schema": {"$ref": "other.json"}}}}}`, `version 1: "schema": `},
		{`{"a": {"versions": {"1": {"schema": {"$ref": "file://` + schemaFile + `"}}}}}`, `a $ref must point inside the schema`},
		{`{"a": {"versions": {"1": {"schema": 5}}}}`, `version 1: "schema": `},
		{`{"a": {"versions": [1], "schemas": {"2": {}}}}`, `"schemas": version 2 is not in "versions"`},
		{`{"a": {"versions": [1], "schemas": []}}`, `"schemas": want an object`},
		{`{"a": {"versions": [1], "schemas": {"one": {}}}}`, `"schemas": key "one"`},
		{`{"a": {"versions": {"1": {"schema": true}}, "schemas": {"1": true}}}`, `a schema in "versions" and one in "schemas"`},
		{`{"a": {"versions": [1], "schemas": {"1": {"minimum": "x"}}}}`, `"schemas": version 1: `},
	} {
		_, err := ParseRegistry([]byte(c.in))
		if !errors.Is(err, ErrInvalidRegistry) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseRegistry(%s) = %v, want ErrInvalidRegistry with %q", c.in, err, c.want)
		}
	}
}

// FuzzParseRegistry: any input is parsed or refused with ErrInvalidRegistry,
// never a panic; what is parsed checks records without panicking.
func FuzzParseRegistry(f *testing.F) {
	f.Add([]byte(catalogue), []byte(`{"invoice_id": "a", "amount": 1}`))
	f.Add([]byte(`{"a": {"versions": [1]}}`), []byte(`{}`))
	f.Add([]byte(`{"a": {"versions": {"1": {"schema": {"$ref": "#/$defs/x", "$defs": {"x": {"type": "array"}}}}}}}`), []byte(`[1]`))
	f.Add([]byte(`{"a": {"versions": {"1": {"schema": {"pattern": "(("}}}}}`), []byte(`"x"`))
	f.Fuzz(func(t *testing.T, data, payload []byte) {
		r, err := ParseRegistry(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidRegistry) {
				t.Fatalf("error without ErrInvalidRegistry: %v", err)
			}
			return
		}
		if !json.Valid(payload) {
			payload = []byte(`{}`)
		}
		for _, e := range r.Entries() {
			for _, kind := range append([]string{""}, Kinds...) {
				_ = r.Check(&Record{Type: e.Type, SchemaVersion: e.Version, Kind: kind, Payload: payload})
			}
		}
		_ = r.Reads()
	})
}
