package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/sse"
	"github.com/heraldgw/herald/gateway/internal/ws"
)

// protocolDocFrom returns docs/protocol.md from the first occurrence of
// marker on.
func protocolDocFrom(t *testing.T, marker string) string {
	t.Helper()
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(doc), marker)
	if i < 0 {
		t.Fatalf("docs/protocol.md has no %q", marker)
	}
	return string(doc[i:])
}

// cursorStep is one event of an SSE stream as far as resuming goes: its
// name ("" for a publication) and the offset its cursor holds for the
// stream's one channel.
type cursorStep struct {
	name   string
	offset uint64
}

func (s cursorStep) String() string { return fmt.Sprintf("%s@%d", s.name, s.offset) }

// docSSEExample returns the events with an id of docs/protocol.md's
// example stream (the first code block after "### The stream").
func docSSEExample(t *testing.T) []cursorStep {
	t.Helper()
	s := protocolDocFrom(t, "### The stream")
	start := strings.Index(s, "```\n")
	end := strings.Index(s[start+4:], "```")
	if start < 0 || end < 0 {
		t.Fatal("no example stream under The stream")
	}
	var steps []cursorStep
	for block := range strings.SplitSeq(s[start+4:start+4+end], "\n\n") {
		var name, id string
		for line := range strings.SplitSeq(block, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			}
			if v, ok := strings.CutPrefix(line, "id: "); ok {
				id = v
			}
		}
		if id == "" {
			continue
		}
		c, err := sse.ParseCursor(id)
		if err != nil || len(c) != 1 {
			t.Fatalf("example id %q: %v, %d entries", id, err, len(c))
		}
		steps = append(steps, cursorStep{name, c[0].Pos.Offset})
	}
	return steps
}

// TestProtocolDocSSECursors: the cursors of docs/protocol.md's example
// stream, which resumes orders/42 from offset 15 with 17 published, are
// those the server writes in the same case: the subscribed event holds the
// resume position, each publication its own offset.
func TestProtocolDocSSECursors(t *testing.T) {
	t.Parallel()
	want := docSSEExample(t)

	e := newEnv(t, envOptions{})
	var at15 fanout.Position
	for range 17 {
		p := e.publish("acme", "orders/42", `1`)
		if p.Offset == 15 {
			at15 = fanout.Position{Offset: p.Offset, Epoch: p.Epoch}
		}
	}
	pos := session.NewPositions("acme", 1)
	pos.Add("orders/42", at15)
	var enc sse.CursorEncoder
	s := e.open(request{bearer: e.token("acme", "u1", "orders/*"), query: q("channel", "orders/42"),
		lastID: string(enc.Encode(pos.Entries))})
	s.next(t, 5*time.Second) // retry
	var got []cursorStep
	for len(got) < len(want) {
		if len(got) == 3 {
			e.publish("acme", "orders/42", `1`) // offset 18, live
		}
		ev := s.nextEvent(t)
		c, err := sse.ParseCursor(ev.ID)
		if !ev.HasID || err != nil || len(c) != 1 {
			t.Fatalf("event %+v: cursor %v", ev, err)
		}
		got = append(got, cursorStep{ev.Name, c[0].Pos.Offset})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("docs/protocol.md's example stream has the cursors %v; the server writes %v", want, got)
	}
}

// docFrameRow is one row of docs/protocol.md's frame table ("Every
// frame"), backquotes dropped.
type docFrameRow struct{ frame, field, typ, presence string }

// docFrameTable reads the table after the "frame table" marker.
func docFrameTable(t *testing.T) []docFrameRow {
	t.Helper()
	var rows []docFrameRow
	for n, line := range strings.Split(protocolDocFrom(t, "<!-- frame table:"), "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if n < 2 { // the header and the separator
			continue
		}
		cells := strings.Split(strings.Trim(strings.ReplaceAll(line, "`", ""), "|"), "|")
		if len(cells) != 5 {
			t.Fatalf("frame table row %q: %d cells, want 5", line, len(cells))
		}
		for k := range cells {
			cells[k] = strings.TrimSpace(cells[k])
		}
		rows = append(rows, docFrameRow{cells[0], cells[1], cells[2], cells[3]})
	}
	if len(rows) == 0 {
		t.Fatal("the frame table is empty")
	}
	return rows
}

// docFrameDefs maps the frame table's server frames to the schema's
// definitions; "" marks a frame the schema has no definition for.
var docFrameDefs = map[string]string{
	"← reply":                               "reply",
	"← connect result":                      "connectResult",
	"← subscribe result, SSE subscribed":    "subscribeResult",
	"← publish result":                      "publishResult",
	"← refresh result":                      "refreshResult",
	"← unsubscribe and ping result":         "emptyResult",
	"← error":                               "error",
	"← pub, SSE publication":                "pub",
	"← ping push":                           "ping",
	"← refresh push":                        "refresh",
	"← unsubscribed push, SSE unsubscribed": "unsubscribed",
	"← disconnect push, SSE disconnect":     "disconnect",
	"SSE reauth":                            "",
}

// schemaField is a field of a schema definition, flattened as the frame
// table writes it (object.field).
type schemaField struct{ typ, presence string }

// fields flattens the properties of the object schema s under prefix.
func (js *jsonSchema) fields(t *testing.T, s map[string]any, prefix string, out map[string]schemaField) {
	t.Helper()
	alts := []map[string]any{s}
	if one, ok := s["oneOf"].([]any); ok && s["properties"] == nil {
		alts = alts[:0]
		for _, a := range one {
			alts = append(alts, js.resolve(t, a.(map[string]any)))
		}
	}
	count := map[string]int{}
	for _, a := range alts {
		req, _ := a["required"].([]any)
		props, _ := a["properties"].(map[string]any)
		for name, p := range props {
			ps := js.resolve(t, p.(map[string]any))
			if _, seen := out[prefix+name]; !seen {
				out[prefix+name] = schemaField{typ: js.typeOf(t, ps), presence: "optional"}
				if sub, isObj := ps["properties"]; isObj && sub != nil || ps["oneOf"] != nil && js.typeOf(t, ps) == "object" && name != "result" {
					js.fields(t, ps, prefix+name+".", out)
				}
			}
			if slices.Contains(req, any(name)) {
				count[name]++
			}
		}
	}
	for name, n := range count {
		if n == len(alts) {
			f := out[prefix+name]
			f.presence = "required"
			out[prefix+name] = f
		}
	}
}

// resolve follows a local $ref.
func (js *jsonSchema) resolve(t *testing.T, s map[string]any) map[string]any {
	t.Helper()
	if ref, ok := s["$ref"].(string); ok {
		return js.def(t, strings.TrimPrefix(ref, "#/$defs/"))
	}
	return s
}

// typeOf is the JSON type of values s allows, as the frame table names it.
func (js *jsonSchema) typeOf(t *testing.T, s map[string]any) string {
	t.Helper()
	if ty, ok := s["type"].(string); ok {
		return ty
	}
	if c, ok := s["const"]; ok {
		if _, isStr := c.(string); isStr {
			return "string"
		}
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		if _, isStr := e[0].(string); isStr {
			return "string"
		}
	}
	if one, ok := s["oneOf"].([]any); ok {
		ty := ""
		for _, a := range one {
			at := js.typeOf(t, js.resolve(t, a.(map[string]any)))
			if ty != "" && at != ty {
				t.Fatalf("a oneOf of %s and %s", ty, at)
			}
			ty = at
		}
		return ty
	}
	if len(s) == 0 || len(s) == 1 && s["description"] != nil {
		return "any"
	}
	t.Fatalf("no JSON type for %v", s)
	return ""
}

// TestProtocolDocFrameTable: docs/protocol.md's frame table lists, for
// every server frame, exactly the fields of its schema definition, each
// with the schema's type and presence; for every request, an op of the
// op table with the fields the server decodes (an id exactly for ops
// that get a reply, a channel exactly for ops that name one); and every
// op has its rows.
func TestProtocolDocFrameTable(t *testing.T) {
	t.Parallel()
	js := loadFrameSchema(t)
	rows := docFrameTable(t)
	byFrame := map[string]map[string]docFrameRow{}
	var order []string
	for _, r := range rows {
		if byFrame[r.frame] == nil {
			byFrame[r.frame] = map[string]docFrameRow{}
			order = append(order, r.frame)
		}
		if _, dup := byFrame[r.frame][r.field]; dup {
			t.Errorf("%s: field %s listed twice", r.frame, r.field)
		}
		byFrame[r.frame][r.field] = r
		if r.presence != "required" && r.presence != "optional" {
			t.Errorf("%s %s: presence %q", r.frame, r.field, r.presence)
		}
		if !slices.Contains([]string{"string", "integer", "boolean", "object", "any"}, r.typ) {
			t.Errorf("%s %s: type %q", r.frame, r.field, r.typ)
		}
	}

	requestFields := map[string]string{} // json name → JSON type
	for _, f := range reflect.VisibleFields(reflect.TypeFor[ws.ClientFrame]()) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		requestFields[name] = map[reflect.Kind]string{reflect.String: "string", reflect.Uint64: "integer",
			reflect.Int: "integer", reflect.Pointer: "object", reflect.Slice: "any"}[f.Type.Kind()]
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[ws.Position]()) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		requestFields["since."+name] = map[reflect.Kind]string{reflect.String: "string", reflect.Uint64: "integer"}[f.Type.Kind()]
	}
	seenOps := map[string]bool{}
	for _, frame := range order {
		fields := byFrame[frame]
		if opName, ok := strings.CutPrefix(frame, "→ "); ok {
			op, known := ws.OpsByName[opName]
			if !known {
				t.Errorf("frame table: request %q is not an op", opName)
				continue
			}
			seenOps[opName] = true
			for name, r := range fields {
				if ty, ok := requestFields[name]; !ok || ty != r.typ {
					t.Errorf("%s: field %s (%s) is not one the server decodes as %s", frame, name, r.typ, ty)
				}
			}
			if _, has := fields["id"]; has != op.Reply {
				t.Errorf("%s: an id row %v, the op gets a reply %v", frame, has, op.Reply)
			}
			if _, has := fields["channel"]; has != op.Channel {
				t.Errorf("%s: a channel row %v, the op names a channel %v", frame, has, op.Channel)
			}
			if _, has := fields["op"]; !has {
				t.Errorf("%s: no op row", frame)
			}
			continue
		}
		def, known := docFrameDefs[frame]
		if !known {
			t.Errorf("frame table: frame %q is neither a request nor a known server frame", frame)
			continue
		}
		if def == "" {
			continue
		}
		want := map[string]schemaField{}
		js.fields(t, js.def(t, def), "", want)
		if len(want) == 0 {
			want["—"] = schemaField{typ: "object", presence: "required"}
		}
		for name, w := range want {
			r, ok := fields[name]
			if !ok {
				t.Errorf("%s: no row for the schema's field %s", frame, name)
				continue
			}
			if r.typ != w.typ || r.presence != w.presence {
				t.Errorf("%s %s: %s %s in the table, %s %s in the schema", frame, name, r.typ, r.presence, w.typ, w.presence)
			}
		}
		for name := range fields {
			if _, ok := want[name]; !ok {
				t.Errorf("%s: field %s is not in $defs/%s", frame, name, def)
			}
		}
	}
	for _, op := range ws.OpTable {
		if !seenOps[op.Name] {
			t.Errorf("frame table: no rows for the op %s", op.Name)
		}
	}
	for frame := range docFrameDefs {
		if byFrame[frame] == nil {
			t.Errorf("frame table: no rows for %s", frame)
		}
	}
	// The SSE publication is the pub push without "push".
	pub, env := map[string]schemaField{}, map[string]schemaField{}
	js.fields(t, js.def(t, "pub"), "", pub)
	js.fields(t, js.def(t, "envelope"), "", env)
	delete(pub, "push")
	if !reflect.DeepEqual(pub, env) {
		t.Errorf("$defs/pub without push is not $defs/envelope: %v, %v", pub, env)
	}
}

// TestProtocolDocLinksTranscripts: docs/protocol.md links every
// transcript of testdata/transcripts, the normative examples, and links
// none that does not exist.
func TestProtocolDocLinksTranscripts(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(transcriptDir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	doc := protocolDocFrom(t, "# ")
	linked := map[string]bool{}
	for _, m := range regexp.MustCompile(`\(\.\./gateway/testdata/transcripts/([^)]+)\)`).FindAllStringSubmatch(doc, -1) {
		linked[m[1]] = true
	}
	for _, f := range files {
		if !linked[filepath.Base(f)] {
			t.Errorf("docs/protocol.md does not link the transcript %s", filepath.Base(f))
		}
		delete(linked, filepath.Base(f))
	}
	for name := range linked {
		t.Errorf("docs/protocol.md links the transcript %s, which does not exist", name)
	}
}
