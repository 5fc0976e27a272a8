package gateway

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
)

const frameSchemaFile = "../docs/schema/herald.v1.json"

// jsonSchema is a JSON Schema document read into plain values. validate
// implements the keywords docs/schema uses (type, const, enum, minimum,
// maximum, minLength, maxLength, pattern, required, properties,
// additionalProperties false, oneOf, not, local $ref), and fails the test
// on any other, so the schema cannot rely on a keyword nothing checks.
type jsonSchema struct {
	root map[string]any
}

func loadFrameSchema(t *testing.T) *jsonSchema {
	t.Helper()
	b, err := os.ReadFile(frameSchemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatalf("%s: %v", frameSchemaFile, err)
	}
	return &jsonSchema{root: root}
}

// def returns the definition name of $defs.
func (js *jsonSchema) def(t *testing.T, name string) map[string]any {
	t.Helper()
	d, ok := js.root["$defs"].(map[string]any)[name].(map[string]any)
	if !ok {
		t.Fatalf("%s has no $defs/%s", frameSchemaFile, name)
	}
	return d
}

// validate checks v against s; the error names the first violation.
func (js *jsonSchema) validate(s map[string]any, v any, at string) error {
	for kw, arg := range s {
		if err := js.keyword(s, kw, arg, v, at); err != nil {
			return err
		}
	}
	return nil
}

func (js *jsonSchema) keyword(s map[string]any, kw string, arg, v any, at string) error {
	fail := func(format string, a ...any) error { return fmt.Errorf("%s: "+format, append([]any{at}, a...)...) }
	obj, isObj := v.(map[string]any)
	str, isStr := v.(string)
	num, isNum := v.(float64)
	switch kw {
	case "$schema", "$id", "title", "description", "$defs":
	case "$ref":
		name, ok := strings.CutPrefix(arg.(string), "#/$defs/")
		d, found := js.root["$defs"].(map[string]any)[name].(map[string]any)
		if !ok || !found {
			return fail("unresolvable $ref %v", arg)
		}
		return js.validate(d, v, at)
	case "type":
		ok := map[string]bool{
			"object": isObj, "string": isStr, "boolean": reflect.TypeOf(v) == reflect.TypeFor[bool](),
			"integer": isNum && num == math.Trunc(num), "number": isNum,
		}[arg.(string)]
		if !ok {
			return fail("%v is not of type %v", v, arg)
		}
	case "const":
		if !reflect.DeepEqual(v, arg) {
			return fail("%v is not %v", v, arg)
		}
	case "enum":
		if !slices.ContainsFunc(arg.([]any), func(e any) bool { return reflect.DeepEqual(e, v) }) {
			return fail("%v is not one of %v", v, arg)
		}
	case "minimum", "maximum":
		if isNum && (kw == "minimum" && num < arg.(float64) || kw == "maximum" && num > arg.(float64)) {
			return fail("%v is out of %s %v", v, kw, arg)
		}
	case "minLength", "maxLength":
		if n := len([]rune(str)); isStr && (kw == "minLength" && n < int(arg.(float64)) || kw == "maxLength" && n > int(arg.(float64))) {
			return fail("%q is out of %s %v", str, kw, arg)
		}
	case "pattern":
		if isStr && !regexp.MustCompile(arg.(string)).MatchString(str) {
			return fail("%q does not match %v", str, arg)
		}
	case "required":
		for _, name := range arg.([]any) {
			if _, ok := obj[name.(string)]; isObj && !ok {
				return fail("%q is missing", name)
			}
		}
	case "properties":
		for name, sub := range arg.(map[string]any) {
			if pv, ok := obj[name]; isObj && ok {
				if err := js.validate(sub.(map[string]any), pv, at+"."+name); err != nil {
					return err
				}
			}
		}
	case "additionalProperties":
		props, _ := s["properties"].(map[string]any)
		for name := range obj {
			if _, ok := props[name]; arg == false && !ok {
				return fail("field %q is not in the schema", name)
			}
		}
	case "oneOf":
		var matched int
		var errs []string
		for _, sub := range arg.([]any) {
			if err := js.validate(sub.(map[string]any), v, at); err != nil {
				errs = append(errs, err.Error())
			} else {
				matched++
			}
		}
		if matched != 1 {
			return fail("matches %d of oneOf, want 1 (%s)", matched, strings.Join(errs, "; "))
		}
	case "not":
		if js.validate(arg.(map[string]any), v, at) == nil {
			return fail("matches what \"not\" excludes")
		}
	default:
		return fail("keyword %q is not supported by this test", kw)
	}
	return nil
}

// frameKinds are the $defs a server frame may match, and resultKinds those
// its result may.
var (
	frameKinds  = []string{"reply", "error", "pub", "ping", "refresh", "unsubscribed", "disconnect"}
	resultKinds = []string{"connectResult", "subscribeResult", "publishResult", "refreshResult", "emptyResult"}
)

// classify validates a server frame: it must match exactly one of
// frameKinds (and a reply's result exactly one of resultKinds); it returns
// the names matched.
func (js *jsonSchema) classify(t *testing.T, raw string) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatalf("frame %s: %v", raw, err)
	}
	if err := js.validate(js.root, v, "frame"); err != nil {
		t.Fatalf("frame %s does not match %s: %v", raw, frameSchemaFile, err)
	}
	var kinds []string
	for _, k := range frameKinds {
		if js.validate(js.def(t, k), v, k) == nil {
			kinds = append(kinds, k)
		}
	}
	if slices.Contains(kinds, "reply") {
		for _, k := range resultKinds {
			if js.validate(js.def(t, k), v.(map[string]any)["result"], k) == nil {
				kinds = append(kinds, k)
			}
		}
	}
	return kinds
}

// enumOf returns the enum of $defs/name.
func (js *jsonSchema) enumOf(t *testing.T, name string) []string {
	t.Helper()
	var out []string
	for _, e := range js.def(t, name)["enum"].([]any) {
		out = append(out, e.(string))
	}
	return out
}

// TestFrameSchemaVocabulary: the schema's reasons, error codes and
// recovery reasons are the vocabulary tables', in their order.
func TestFrameSchemaVocabulary(t *testing.T) {
	js := loadFrameSchema(t)
	var reasons, codes, recovery []string
	for _, r := range session.Reasons {
		reasons = append(reasons, r.Code)
	}
	for _, e := range ws.Errors {
		codes = append(codes, e.Code)
	}
	for _, r := range session.RecoveryReasons {
		recovery = append(recovery, r.Code)
	}
	for name, want := range map[string][]string{"reason": reasons, "errorCode": codes, "recoveryReason": recovery} {
		if got := js.enumOf(t, name); !slices.Equal(got, want) {
			t.Errorf("%s $defs/%s enum\n%v\nwant (the vocabulary table)\n%v", frameSchemaFile, name, got, want)
		}
	}
}
