package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/timefmt"
)

// testTime and testMessage are the message the tests deliver.
var testTime = time.Date(2025, 3, 1, 10, 15, 30, 123456000, time.UTC)

func testMessage(id string) Message {
	return Message{
		ID:            id,
		Tenant:        "acme",
		Channel:       "billing/invoices",
		Kind:          "integration_event",
		Type:          "invoice.paid",
		SchemaVersion: 2,
		Time:          testTime,
		Data:          json.RawMessage(`{"invoice":"in_42","amount":1250}`),
	}
}

func TestAppendBody(t *testing.T) {
	m := testMessage("0f8fad5b-d9cb-469f-a165-70867728950e")
	m.Data = json.RawMessage(`{"invoice": "in_42", "amount": 1250}`) // as PostgreSQL prints jsonb
	b, err := AppendBody([]byte("keep:"), &m)
	if err != nil {
		t.Fatal(err)
	}
	want := `keep:{"id":"0f8fad5b-d9cb-469f-a165-70867728950e","tenant":"acme","channel":"billing/invoices","kind":"integration_event",` +
		`"type":"invoice.paid","schema_version":2,"time":"2025-03-01T10:15:30.123456000Z","freshness":{"mode":"immediate"},` +
		`"data":{"invoice":"in_42","amount":1250}}`
	if string(b) != want {
		t.Fatalf("body\n%s\nwant\n%s", b, want)
	}
}

// The body is JSON whatever the strings hold; time is UTC with nine
// fractional digits; an empty kind is "notification"; freshness is kept.
func TestAppendBodyEscapesAndDefaults(t *testing.T) {
	m := Message{
		ID:            "id-1",
		Tenant:        "t\"e\\n\x00\u2028",
		Channel:       "a/\xffb\n",
		Type:          "x.y",
		SchemaVersion: 1,
		Time:          time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600)),
		Freshness:     json.RawMessage(` { "mode" : "advisory", "authority" : "rec-7" } `),
		Data:          json.RawMessage(`"<&>"`),
	}
	b, err := AppendBody(nil, &m)
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		ID, Tenant, Channel, Kind, Type, Time string
		SchemaVersion                         int `json:"schema_version"`
		Freshness                             map[string]string
		Data                                  string
	}
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	if env.Tenant != m.Tenant || env.Channel != "a/\ufffdb\n" || env.Kind != "notification" || env.Time != "2025-01-02T02:04:05.000000000Z" ||
		env.Freshness["authority"] != "rec-7" || env.Data != "<&>" || env.SchemaVersion != 1 {
		t.Fatalf("decoded %+v from %s", env, b)
	}
	if strings.Contains(string(b), "\u2028") || strings.Contains(string(b), " ") {
		t.Fatalf("body holds a raw U+2028 or a space: %s", b)
	}
	for _, key := range []string{`"offset"`, `"epoch"`} {
		if strings.Contains(string(b), key) {
			t.Fatalf("body holds %s", key)
		}
	}
}

func TestAppendBodyInvalid(t *testing.T) {
	m := testMessage("id")
	m.Data = json.RawMessage(`{"a":}`)
	b, err := AppendBody([]byte("x"), &m)
	if !errors.Is(err, ErrInvalidMessage) || string(b) != "x" {
		t.Fatalf("AppendBody = %q, %v", b, err)
	}
}

// For valid JSON, appendStripped makes what json.Compact makes: jsonb's
// text, indented text, whitespace and quotes inside strings, escapes.
func TestAppendStrippedIsCompact(t *testing.T) {
	for _, raw := range strippedSeeds {
		checkStripped(t, []byte(raw))
	}
}

// DataIsJSON: the body is the same, with data stripped, not validated.
func TestAppendBodyDataIsJSON(t *testing.T) {
	m := testMessage("0f8fad5b-d9cb-469f-a165-70867728950e")
	m.Data = json.RawMessage(`{"invoice": "in 42", "lines": [{"sku": "a \"b\" c", "n": 1}]}`)
	want, err := AppendBody(nil, &m)
	if err != nil {
		t.Fatal(err)
	}
	m.DataIsJSON = true
	got, err := AppendBody([]byte("keep:"), &m)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "keep:"+string(want) {
		t.Fatalf("body\n%s\nwant\n%s", got, want)
	}
	if !json.Valid(got[len("keep:"):]) || !strings.HasSuffix(string(got), `"data":{"invoice":"in 42","lines":[{"sku":"a \"b\" c","n":1}]}}`) {
		t.Fatalf("body %s", got)
	}
}

var strippedSeeds = []string{
	`{"invoice": "in_42", "amount": 1250, "lines": [{"sku": "plan-pro", "quantity": 1}], "paid": true, "note": null}`,
	"{\n  \"a\" : [ 1 ,\t2 ,\r\n 3 ] ,\n  \"b\" : { }\n}",
	`"a string with  spaces, a \" quote and a \\ backslash"`,
	`{"k \\": " v \\\" x ", "e": "\u00e9 \n", "s": "\\"}`,
	` 42 `, `[]`, `"\\\\"`, `{"a":"\"","b":" "}`,
}

func checkStripped(t *testing.T, raw []byte) {
	t.Helper()
	var want bytes.Buffer
	if err := json.Compact(&want, raw); err != nil {
		return // only valid JSON is stripped
	}
	if got := appendStripped([]byte("x"), raw); string(got) != "x"+want.String() {
		t.Fatalf("appendStripped(%q) = %q, want %q", raw, got[1:], want.String())
	}
}

func FuzzAppendStripped(f *testing.F) {
	for _, s := range strippedSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkStripped)
}

// The body's time (timefmt.Append) is what AppendFormat(TimeLayout)
// writes in UTC.
func TestAppendTime(t *testing.T) {
	for _, tm := range []time.Time{
		time.Date(2025, 3, 1, 10, 15, 30, 123456000, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("X", -3600)),
		time.Date(10000, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Unix(0, 0),
		time.Now(),
	} {
		checkTime(t, tm)
	}
}

func checkTime(t *testing.T, tm time.Time) {
	t.Helper()
	want := tm.UTC().Format(TimeLayout)
	if got := timefmt.Append([]byte("x"), tm); string(got) != "x"+want {
		t.Fatalf("timefmt.Append(%v) = %q, want %q", tm, got[1:], want)
	}
}

func FuzzAppendTime(f *testing.F) {
	f.Add(int64(0), int64(0))
	f.Add(int64(1740824130), int64(123456789))
	f.Fuzz(func(t *testing.T, sec, nsec int64) { checkTime(t, time.Unix(sec, nsec)) })
}

// The body's pieces as the Worker writes them, beside what they replace:
// go test -run '^$' -bench 'BenchmarkBodyParts' ./outboxfeed/webhook/
func BenchmarkBodyParts(b *testing.B) {
	data := []byte(`{"invoice": "in_000042", "customer": "cus_000042", "amount": 1042, "currency": "EUR", "lines": [{"sku": "plan-pro", "quantity": 1, "unit_amount": 1042}], "paid_at": "2025-03-01T10:15:30Z"}`)
	tm := time.Date(2025, 3, 1, 10, 15, 30, 123456789, time.UTC)
	buf := make([]byte, 0, 512)
	b.Run("stripped", func(b *testing.B) {
		for b.Loop() {
			buf = appendStripped(buf[:0], data)
		}
	})
	b.Run("compact", func(b *testing.B) {
		for b.Loop() {
			buf, _ = appendCompact(buf[:0], data)
		}
	})
	b.Run("time", func(b *testing.B) {
		for b.Loop() {
			buf = timefmt.Append(buf[:0], tm)
		}
	})
	b.Run("time-format", func(b *testing.B) {
		for b.Loop() {
			buf = tm.AppendFormat(buf[:0], TimeLayout)
		}
	})
}
