package fanout

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func samplePublication() Publication {
	return Publication{
		Message: Message{
			ID:            "0190a0b1-7c2d-7e3f-8a4b-5c6d7e8f9a0b",
			Key:           Key{Tenant: "acme", Channel: "orders/42"},
			Type:          "order.updated",
			SchemaVersion: 2,
			Time:          time.Date(2025, 3, 4, 5, 6, 7, 890000000, time.FixedZone("X", 3600)),
			Data:          json.RawMessage("{\n  \"status\": \"shipped\",\n  \"items\": [1, 2, 3]\n}"),
		},
		Position: Position{Offset: 7, Epoch: "a1b2c3d4e5f60718"},
	}
}

func TestPreparedEnvelopeExactBytes(t *testing.T) {
	p := NewPrepared(samplePublication())
	want := `{"id":"0190a0b1-7c2d-7e3f-8a4b-5c6d7e8f9a0b","channel":"orders/42","offset":7,"epoch":"a1b2c3d4e5f60718",` +
		`"type":"order.updated","schema_version":2,"time":"2025-03-04T04:06:07.890000000Z",` +
		`"freshness":{"mode":"immediate"},"data":{"status":"shipped","items":[1,2,3]}}`
	if got := string(p.JSON()); got != want {
		t.Fatalf("envelope\n got %s\nwant %s", got, want)
	}
	if p.Size() != len(want) || p.Key() != (Key{"acme", "orders/42"}) || p.Position() != (Position{7, "a1b2c3d4e5f60718"}) {
		t.Fatalf("accessors: size %d key %v pos %v", p.Size(), p.Key(), p.Position())
	}
}

func TestPreparedFreshnessAndEscaping(t *testing.T) {
	pub := samplePublication()
	pub.ID = "quote\" back\\ nl\n tab\t ctl\x01 ls\u2028 ok é"
	pub.Type = "bad\xffutf8"
	pub.Freshness = json.RawMessage(` { "mode" : "advisory", "authority" : "rec-1" } `)
	p := NewPrepared(pub)
	if bytes.ContainsAny(p.JSON(), "\n\r") {
		t.Fatalf("envelope contains a newline: %s", p.JSON())
	}
	if !json.Valid(p.JSON()) {
		t.Fatalf("envelope is not valid JSON: %s", p.JSON())
	}
	if !bytes.Contains(p.JSON(), []byte(`"freshness":{"mode":"advisory","authority":"rec-1"}`)) {
		t.Fatalf("freshness not compacted in place: %s", p.JSON())
	}
	got, err := DecodeEnvelope(p.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != pub.ID || got.Type != "bad\uFFFDutf8" {
		t.Fatalf("round trip: id %q type %q", got.ID, got.Type)
	}
}

func TestPreparedInvalidDataEncodesNull(t *testing.T) {
	pub := samplePublication()
	pub.Data = json.RawMessage(`{"unterminated":`)
	p := NewPrepared(pub)
	if !json.Valid(p.JSON()) || !bytes.HasSuffix(p.JSON(), []byte(`"data":null}`)) {
		t.Fatalf("envelope with invalid data: %s", p.JSON())
	}
}

func TestDecodeEnvelopeRoundTrip(t *testing.T) {
	pub := samplePublication()
	got, err := DecodeEnvelope(NewPrepared(pub).JSON())
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != pub.ID || got.Key != (Key{Channel: "orders/42"}) || got.Position != pub.Position ||
		got.Type != pub.Type || got.SchemaVersion != 2 || !got.Time.Equal(pub.Time) || got.Time.Location() != time.UTC {
		t.Fatalf("round trip mismatch: %+v", got)
	}
	if string(got.Data) != `{"status":"shipped","items":[1,2,3]}` || string(got.Freshness) != string(ImmediateFreshness) {
		t.Fatalf("data %s freshness %s", got.Data, got.Freshness)
	}
}

// TestEnvelopeParts: head, the offset, the epoch and tail joined as the
// Redis publish script joins them are the envelope NewPrepared encodes.
func TestEnvelopeParts(t *testing.T) {
	pub := samplePublication()
	head, tail := EnvelopeParts(&pub)
	joined := string(head) + "7" + `,"epoch":"a1b2c3d4e5f60718",` + string(tail)
	if want := string(NewPrepared(pub).JSON()); joined != want {
		t.Fatalf("joined parts\n got %s\nwant %s", joined, want)
	}
	if !strings.HasSuffix(string(head), `"offset":`) || !strings.HasPrefix(string(tail), `"type":`) {
		t.Fatalf("head %s tail %s", head, tail)
	}
}

// TestPreparedFromEnvelope keeps the envelope's bytes and adds the tenant
// the envelope does not carry; what DecodeEnvelope refuses, it refuses.
func TestPreparedFromEnvelope(t *testing.T) {
	pub := samplePublication()
	env := NewPrepared(pub).JSON()
	p, err := PreparedFromEnvelope("acme", env)
	if err != nil {
		t.Fatal(err)
	}
	if &p.JSON()[0] != &env[0] || p.Key() != pub.Key || p.Position() != pub.Position || p.Publication().ID != pub.ID {
		t.Fatalf("prepared %+v from %s", p.Publication(), env)
	}
	if _, err := PreparedFromEnvelope("acme", []byte(`{"id":"i"}`)); !errors.Is(err, ErrInvalidEnvelope) {
		t.Fatalf("a broken envelope: err = %v, want ErrInvalidEnvelope", err)
	}
}

func TestDecodeEnvelopeRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not json":    `{"id":`,
		"no id":       `{"channel":"c","offset":1,"epoch":"e","data":1}`,
		"no channel":  `{"id":"i","offset":1,"epoch":"e","data":1}`,
		"zero offset": `{"id":"i","channel":"c","offset":0,"epoch":"e","data":1}`,
		"no epoch":    `{"id":"i","channel":"c","offset":1,"data":1}`,
		"no data":     `{"id":"i","channel":"c","offset":1,"epoch":"e"}`,
		"bad time":    `{"id":"i","channel":"c","offset":1,"epoch":"e","time":"yesterday","data":1}`,
	} {
		if _, err := DecodeEnvelope([]byte(in)); !errors.Is(err, ErrInvalidEnvelope) {
			t.Errorf("%s: err = %v, want ErrInvalidEnvelope", name, err)
		}
	}
}

func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(NewPrepared(samplePublication()).JSON())
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"id":"i","channel":"c","offset":1,"epoch":"e","data":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeEnvelope(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to valid JSON that decodes the same.
		again, err := DecodeEnvelope(NewPrepared(p).JSON())
		if err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v", err)
		}
		if again.ID != p.ID || again.Position != p.Position || again.Key != p.Key {
			t.Fatalf("re-encode changed the publication: %+v vs %+v", again, p)
		}
	})
}

// TestPreparedTimeNineDigits: the envelope's time is UTC with exactly nine
// fractional digits (docs/protocol.md), trailing zeros included.
func TestPreparedTimeNineDigits(t *testing.T) {
	for in, want := range map[time.Time]string{
		time.Date(2025, 3, 4, 5, 6, 7, 0, time.FixedZone("X", 3600)): "2025-03-04T04:06:07.000000000Z",
		time.Date(2025, 3, 4, 5, 6, 7, 120000, time.UTC):             "2025-03-04T05:06:07.000120000Z",
		time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC):          "2025-03-04T05:06:07.123456789Z",
	} {
		pub := samplePublication()
		pub.Time = in
		if got := NewPrepared(pub).JSON(); !bytes.Contains(got, []byte(`"time":"`+want+`"`)) {
			t.Fatalf("time %v: envelope %s, want time %s", in, got, want)
		}
	}
}
