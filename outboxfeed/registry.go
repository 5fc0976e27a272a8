package outboxfeed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/heraldgw/herald/outboxfeed/internal/rules"
)

// Registry is the catalogue of the (type, schema_version) pairs this
// deployment reads, loaded from a JSON file (docs/events.md):
//
//	{"order.updated": {"versions": [1, 2]}}
//
// or, with what the catalogue says of each pair:
//
//	{"invoice.paid": {
//	  "kind": "integration_event", "direction": "published", "trust": "internal",
//	  "handlers": ["billing"],
//	  "versions": {"1": {}, "2": {"schema": {"type": "object", "required": ["invoice_id"]}}}}}
//
// A record of a pair the catalogue does not list, of another kind than
// the one it declares, or whose payload fails its JSON Schema is
// dead-lettered before any handler sees it (Check). A nil *Registry
// accepts every type at any version ≥ 1.
type Registry struct {
	readers map[string][]int // sorted versions per type
	entries map[TypeVersion]*Entry
}

// TypeVersion is one (type, schema_version) pair. A Worker without a
// catalogue reads every pair: it reports AnyType.
type TypeVersion struct {
	Type    string `json:"type"`
	Version int    `json:"version"`
}

// AnyType is what a Worker without a catalogue reads: every type at every
// version ≥ 1.
var AnyType = TypeVersion{Type: "*"}

func (tv TypeVersion) String() string {
	if tv == AnyType {
		return "every type"
	}
	return fmt.Sprintf("%s v%d", tv.Type, tv.Version)
}

// Direction says which way a fact crosses the application's boundary.
type Direction string

const (
	// DirectionPublished: the application states this fact for others
	// (its own code stages it; handlers carry it out to screens, webhooks
	// and other services).
	DirectionPublished Direction = "published"
	// DirectionConsumed: another system stated this fact; the application
	// received it and stages it so its own handlers react (an inbound
	// webhook relayed to screens, a partner's event fanned out).
	DirectionConsumed Direction = "consumed"
)

// Directions are the directions a catalogue entry may declare.
var Directions = []Direction{DirectionPublished, DirectionConsumed}

// Trust says how far readers may rely on a payload's content.
type Trust string

const (
	// TrustInternal: written by the application's own code from its own
	// state; readers rely on its fields.
	TrustInternal Trust = "internal"
	// TrustPartner: comes from a known party under an agreement
	// (authenticated, contract-bound); readers rely on its shape, check
	// what they act on.
	TrustPartner Trust = "partner"
	// TrustExternal: comes from outside any agreement (a public endpoint,
	// an unauthenticated sender); readers treat every field as untrusted
	// input. A schema is strongly advised.
	TrustExternal Trust = "external"
)

// Trusts are the trust levels a catalogue entry may declare.
var Trusts = []Trust{TrustInternal, TrustPartner, TrustExternal}

// Entry is what the catalogue says of one (type, version).
type Entry struct {
	Type    string
	Version int
	// Description is free text for people.
	Description string
	// Kind is the record kind (Kinds) records of the pair must carry;
	// empty: not declared, any kind.
	Kind string
	// Direction and Trust: required for an integration_event, optional
	// otherwise (empty: not declared).
	Direction Direction
	Trust     Trust
	// Handlers names the handlers the pair is routed to. Informative (the
	// handlers' routes decide); CheckHandlers checks the names exist, and
	// `herald types check` asks only their Workers.
	Handlers []string
	// Schema is the JSON Schema of the payload (nil: none), as written.
	Schema json.RawMessage

	schema *jsonschema.Schema
}

// LoadRegistry reads and parses a registry file.
func LoadRegistry(path string) (*Registry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRegistry, err)
	}
	r, err := ParseRegistry(b)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return r, nil
}

// The members of a type's object, and of a version's object. A member
// starting with "#" is a comment, ignored anywhere.
var (
	typeKeys    = []string{"description", "versions", "kind", "direction", "trust", "handlers", "schemas"}
	versionKeys = []string{"description", "kind", "direction", "trust", "handlers", "schema"}
)

// ParseRegistry parses registry JSON. Its errors wrap ErrInvalidRegistry
// and name the type, the version and the member at fault.
func ParseRegistry(data []byte) (*Registry, error) {
	r, err := parseRegistry(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRegistry, err)
	}
	return r, nil
}

func parseRegistry(data []byte) (*Registry, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("want a JSON object of types: %v", err)
	}
	if raw == nil {
		return nil, errors.New("want a JSON object of types")
	}
	r := &Registry{readers: make(map[string][]int, len(raw)), entries: map[TypeVersion]*Entry{}}
	for _, typ := range sortedKeys(raw) {
		if strings.HasPrefix(typ, "#") {
			continue
		}
		if err := rules.ValidateType(typ); err != nil {
			return nil, err
		}
		if err := r.parseType(typ, raw[typ]); err != nil {
			return nil, fmt.Errorf("type %q: %v", typ, err)
		}
	}
	return r, nil
}

func (r *Registry) parseType(typ string, data json.RawMessage) error {
	members, err := object(data, typeKeys)
	if err != nil {
		return err
	}
	var base Entry
	if err := base.decode(members); err != nil {
		return err
	}
	vraw, ok := members["versions"]
	if !ok || isNull(vraw) {
		return errors.New(`"versions" must list at least one schema version`)
	}
	perVersion := map[int]json.RawMessage{}
	var list []int
	if t := firstByte(vraw); t == '[' {
		if err := json.Unmarshal(vraw, &list); err != nil {
			return fmt.Errorf(`"versions": want a list of integers ≥ 1 or an object keyed by version: %v`, err)
		}
	} else if t == '{' {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(vraw, &obj); err != nil {
			return fmt.Errorf(`"versions": %v`, err)
		}
		for _, k := range sortedKeys(obj) {
			if strings.HasPrefix(k, "#") {
				continue
			}
			v, err := versionKey(k)
			if err != nil {
				return fmt.Errorf(`"versions": %v`, err)
			}
			list = append(list, v)
			perVersion[v] = obj[k]
		}
	} else {
		return errors.New(`"versions": want a list of integers ≥ 1 or an object keyed by version`)
	}
	if len(list) == 0 {
		return errors.New(`"versions" must list at least one schema version`)
	}
	for _, v := range list {
		if v < 1 {
			return fmt.Errorf("version %d: must be ≥ 1", v)
		}
	}
	sort.Ints(list)
	list = slices.Compact(list)
	schemas, err := versionSchemas(members["schemas"], list)
	if err != nil {
		return err
	}
	r.readers[typ] = list
	for _, v := range list {
		e := base
		e.Type, e.Version = typ, v
		e.Handlers = slices.Clone(base.Handlers)
		if data, ok := perVersion[v]; ok {
			if err := e.parseVersion(data); err != nil {
				return fmt.Errorf("version %d: %v", v, err)
			}
		}
		if s, ok := schemas[v]; ok {
			if e.schema != nil {
				return fmt.Errorf(`version %d: a schema in "versions" and one in "schemas": give one`, v)
			}
			if e.schema, err = compileSchema(s); err != nil {
				return fmt.Errorf(`"schemas": version %d: %v`, v, err)
			}
			e.Schema = slices.Clone(s)
		}
		if err := e.validate(); err != nil {
			return fmt.Errorf("version %d: %v", v, err)
		}
		r.entries[TypeVersion{typ, v}] = &e
	}
	return nil
}

// versionKey parses a member name that is a version, written plainly.
func versionKey(k string) (int, error) {
	v, err := strconv.Atoi(k)
	if err != nil || strconv.Itoa(v) != k {
		return 0, fmt.Errorf(`key %q: want a version number such as "1"`, k)
	}
	return v, nil
}

// versionSchemas reads a type's "schemas" member: an object of JSON
// Schemas keyed by version, each version one of versions.
func versionSchemas(raw json.RawMessage, versions []int) (map[int]json.RawMessage, error) {
	if raw == nil || isNull(raw) {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, errors.New(`"schemas": want an object of JSON Schemas keyed by version`)
	}
	out := map[int]json.RawMessage{}
	for _, k := range sortedKeys(obj) {
		if strings.HasPrefix(k, "#") || isNull(obj[k]) {
			continue
		}
		v, err := versionKey(k)
		if err != nil {
			return nil, fmt.Errorf(`"schemas": %v`, err)
		}
		if _, ok := slices.BinarySearch(versions, v); !ok {
			return nil, fmt.Errorf(`"schemas": version %d is not in "versions"`, v)
		}
		out[v] = obj[k]
	}
	return out, nil
}

func (e *Entry) parseVersion(data json.RawMessage) error {
	members, err := object(data, versionKeys)
	if err != nil {
		return err
	}
	if err := e.decode(members); err != nil {
		return err
	}
	s, ok := members["schema"]
	if !ok || isNull(s) {
		return nil
	}
	sch, err := compileSchema(s)
	if err != nil {
		return fmt.Errorf(`"schema": %v`, err)
	}
	e.Schema, e.schema = slices.Clone(s), sch
	return nil
}

// decode sets the members common to a type and a version that members
// holds (a version's override its type's).
func (e *Entry) decode(members map[string]json.RawMessage) error {
	str := func(key string, dst *string) error {
		v, ok := members[key]
		if !ok {
			return nil
		}
		if err := json.Unmarshal(v, dst); err != nil || isNull(v) {
			return fmt.Errorf("%q: want a string", key)
		}
		return nil
	}
	var dir, trust string
	dir, trust = string(e.Direction), string(e.Trust)
	for _, m := range []struct {
		key string
		dst *string
	}{{"description", &e.Description}, {"kind", &e.Kind}, {"direction", &dir}, {"trust", &trust}} {
		if err := str(m.key, m.dst); err != nil {
			return err
		}
	}
	e.Direction, e.Trust = Direction(dir), Trust(trust)
	if v, ok := members["handlers"]; ok {
		var hs []string
		if err := json.Unmarshal(v, &hs); err != nil || isNull(v) {
			return errors.New(`"handlers": want a list of handler names`)
		}
		e.Handlers = hs
	}
	return nil
}

// validate checks what the entry declares.
func (e *Entry) validate() error {
	if e.Kind != "" && !ValidKind(e.Kind) {
		return fmt.Errorf(`"kind" %q: want one of %s`, e.Kind, strings.Join(Kinds, ", "))
	}
	if e.Direction != "" && !slices.Contains(Directions, e.Direction) {
		return fmt.Errorf(`"direction" %q: want published or consumed`, e.Direction)
	}
	if e.Trust != "" && !slices.Contains(Trusts, e.Trust) {
		return fmt.Errorf(`"trust" %q: want internal, partner or external`, e.Trust)
	}
	if e.Kind == "integration_event" && (e.Direction == "" || e.Trust == "") {
		return errors.New(`an integration_event declares its "direction" and its "trust"`)
	}
	seen := map[string]bool{}
	for _, h := range e.Handlers {
		if err := ValidateHandlerName(h); err != nil {
			return fmt.Errorf(`"handlers": %v`, err)
		}
		if seen[h] {
			return fmt.Errorf(`"handlers": %q listed twice`, h)
		}
		seen[h] = true
	}
	return nil
}

// object decodes data as a JSON object whose members are among known (or
// comments, starting with "#").
func object(data json.RawMessage, known []string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return nil, errors.New("want a JSON object")
	}
	for _, k := range sortedKeys(m) {
		if strings.HasPrefix(k, "#") {
			delete(m, k)
			continue
		}
		if !slices.Contains(known, k) {
			return nil, fmt.Errorf("unknown member %q: want one of %s (or a \"#\" comment)", k, strings.Join(known, ", "))
		}
	}
	return m, nil
}

// compileSchema compiles one JSON Schema (draft 2020-12 unless its
// $schema says otherwise). It loads nothing: a $ref must point inside the
// schema.
func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	const loc = schemaLoc
	if err := c.AddResource(loc, doc); err != nil {
		return nil, oneLine(err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, oneLine(err)
	}
	return sch, nil
}

// schemaLoc is the URL a schema is compiled under: a relative $ref
// resolves against it to a URL nothing loads.
const schemaLoc = "https://herald.invalid/schema.json"

// noLoader refuses every URL a schema references outside itself (the
// library's default reads local files).
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, errors.New("a $ref must point inside the schema; nothing is loaded")
}

// oneLine flattens a multi-line library error for a log line or a
// dead-letter reason, without the header line of a validation error and
// with the schema's made-up URL as "schema".
func oneLine(err error) error {
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	if len(lines) > 1 && strings.HasPrefix(lines[0], "jsonschema validation failed") {
		lines = lines[1:]
	}
	for i := range lines {
		lines[i] = strings.TrimLeft(strings.TrimSpace(lines[i]), "- ")
	}
	return errors.New(strings.ReplaceAll(strings.Join(lines, "; "), schemaLoc, "schema"))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func firstByte(raw json.RawMessage) byte {
	if b := bytes.TrimSpace(raw); len(b) > 0 {
		return b[0]
	}
	return 0
}

// Reader returns nil when a record of typ at version can be read, and
// otherwise the dead-letter reason "no reader for <type> v<n>".
func (r *Registry) Reader(typ string, version int) error {
	if version < 1 {
		return fmt.Errorf("no reader for %s v%d", typ, version)
	}
	if r == nil {
		return nil
	}
	if _, ok := slices.BinarySearch(r.readers[typ], version); ok {
		return nil
	}
	return fmt.Errorf("no reader for %s v%d", typ, version)
}

var errPayloadNotJSON = errors.New("payload is not decodable JSON")

// Check returns nil when rec can be handed to a handler, and otherwise the
// dead-letter reason: no reader for its (type, version) (Reader), a kind
// other than the one the catalogue declares for it, or a payload that
// fails the pair's JSON Schema (or is not JSON).
func (r *Registry) Check(rec *Record) error {
	if err := r.Reader(rec.Type, rec.SchemaVersion); err != nil || r == nil {
		return err
	}
	e := r.entries[TypeVersion{rec.Type, rec.SchemaVersion}]
	kind := rec.Kind
	if kind == "" {
		kind = "notification"
	}
	if e.Kind != "" && kind != e.Kind {
		return fmt.Errorf("kind %s does not match the catalogue's %s for %s v%d", kind, e.Kind, e.Type, e.Version)
	}
	if e.schema == nil {
		return nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(rec.Payload))
	if err != nil {
		return errPayloadNotJSON
	}
	if err := e.schema.Validate(doc); err != nil {
		return fmt.Errorf("payload fails the schema of %s v%d: %v", e.Type, e.Version, oneLine(err))
	}
	return nil
}

// Types returns a copy of the registered versions per type.
func (r *Registry) Types() map[string][]int {
	out := map[string][]int{}
	if r == nil {
		return out
	}
	for t, vs := range r.readers {
		out[t] = slices.Clone(vs)
	}
	return out
}

// Entries returns the catalogue's entries ordered by type then version.
func (r *Registry) Entries() []Entry {
	if r == nil {
		return nil
	}
	out := make([]Entry, 0, len(r.entries))
	for _, e := range r.entries {
		c := *e
		c.Handlers, c.Schema = slices.Clone(e.Handlers), slices.Clone(e.Schema)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return a.Version - b.Version
	})
	return out
}

// Entry returns what the catalogue says of (typ, version), and whether it
// lists the pair.
func (r *Registry) Entry(typ string, version int) (Entry, bool) {
	if r == nil {
		return Entry{}, false
	}
	e, ok := r.entries[TypeVersion{typ, version}]
	if !ok {
		return Entry{}, false
	}
	c := *e
	c.Handlers, c.Schema = slices.Clone(e.Handlers), slices.Clone(e.Schema)
	return c, true
}

// Reads lists the pairs a Worker with this catalogue reads, ordered; a nil
// Registry reads AnyType.
func (r *Registry) Reads() []TypeVersion {
	if r == nil {
		return []TypeVersion{AnyType}
	}
	out := make([]TypeVersion, 0, len(r.entries))
	for _, e := range r.Entries() {
		out = append(out, TypeVersion{e.Type, e.Version})
	}
	return out
}

// CheckHandlers returns an error naming every handler the catalogue
// routes a pair to that is not among known (the configured handlers,
// RealtimeHandler included if it runs), or nil.
func (r *Registry) CheckHandlers(known []string) error {
	var bad []string
	for _, e := range r.Entries() {
		for _, h := range e.Handlers {
			if !slices.Contains(known, h) {
				bad = append(bad, fmt.Sprintf("%s v%d names handler %q", e.Type, e.Version, h))
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s, which is not configured (handlers: %s)", ErrInvalidRegistry,
			strings.Join(bad, "; "), strings.Join(known, ", "))
	}
	return nil
}
