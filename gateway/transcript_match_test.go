package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// decode reads an expected frame.
func (r *replay) decode(s string) any {
	var v any
	if err := decodeNumbers([]byte(s), &v); err != nil {
		r.fatalf("expected frame %s: %v", s, err)
	}
	return v
}

func decodeNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// match checks got against the pattern want, binding variables.
func (r *replay) match(want, got any, at string) error {
	switch w := want.(type) {
	case string:
		if p, ok := strings.CutPrefix(w, "~"); ok {
			s, isStr := got.(string)
			if !isStr || !regexp.MustCompile(p).MatchString(s) {
				return fmt.Errorf("%s: %v does not match /%s/", at, got, p)
			}
			return nil
		}
		if name, ok := strings.CutPrefix(w, "$"); ok {
			return r.bind(name, got, at)
		}
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an object", at, got)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				return fmt.Errorf("%s: field %q is not expected", at, k)
			}
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s: no field %q", at, k)
			}
			if err := r.match(wv, gv, at+"."+k); err != nil {
				return err
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: %v is not an array of %d", at, got, len(w))
		}
		for i := range w {
			if err := r.match(w[i], g[i], fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
		return nil
	}
	wb, _ := json.Marshal(want)
	gb, _ := json.Marshal(got)
	if !bytes.Equal(wb, gb) {
		return fmt.Errorf("%s: %s, want %s", at, gb, wb)
	}
	return nil
}

func (r *replay) bind(name string, got any, at string) error {
	gb, _ := json.Marshal(got)
	if name == "_" {
		return nil
	}
	if base, ok := strings.CutSuffix(name, "="); ok {
		r.vars[base] = string(gb)
		return nil
	}
	if base, ok := strings.CutSuffix(name, "++"); ok {
		n, isNum := got.(json.Number)
		v, err := n.Int64()
		if !isNum || err != nil {
			return fmt.Errorf("%s: %s is not an integer", at, gb)
		}
		if prev, bound := r.vars[base]; bound && prev != strconv.FormatInt(v-1, 10) {
			return fmt.Errorf("%s: %d, want %s+1", at, v, prev)
		}
		r.vars[base] = n.String()
		return nil
	}
	if prev, bound := r.vars[name]; bound {
		if prev != string(gb) {
			return fmt.Errorf("%s: %s, want $%s = %s", at, gb, name, prev)
		}
		return nil
	}
	r.vars[name] = string(gb)
	return nil
}

// TestTranscriptPatterns: the patterns of an expected frame accept what
// they should and nothing else, and a failed match binds nothing.
func TestTranscriptPatterns(t *testing.T) {
	t.Parallel()
	r := &replay{t: t, vars: map[string]string{"n": "4", "s": `"x"`}}
	cases := []struct {
		want, got string
		ok        bool
	}{
		{`{"a":1}`, `{"a":1}`, true},
		{`{"a":1}`, `{"a":1,"b":2}`, false}, // a field not listed
		{`{"a":1,"b":2}`, `{"a":1}`, false}, // a field missing
		{`{"a":"$_"}`, `{"a":[1,{"b":null}]}`, true},
		{`{"a":"$n"}`, `{"a":4}`, true},
		{`{"a":"$n"}`, `{"a":5}`, false},
		{`{"a":"$s"}`, `{"a":"x"}`, true},
		{`{"a":"$n++"}`, `{"a":5}`, true}, // n is 5 from here on
		{`{"a":"$n++"}`, `{"a":5}`, false},
		{`{"a":"$n++"}`, `{"a":"6"}`, false},
		{`{"a":"$s="}`, `{"a":"y"}`, true}, // s is "y" from here on
		{`{"a":"$s"}`, `{"a":"x"}`, false},
		{`{"a":"~^[0-9]+$"}`, `{"a":"123"}`, true},
		{`{"a":"~^[0-9]+$"}`, `{"a":123}`, false},
		{`{"a":"$fresh","b":"$fresh"}`, `{"a":1,"b":2}`, false},
		{`[1,2]`, `[1,2,3]`, false},
		{`{"a":1.5}`, `{"a":1.50}`, false},
	}
	for _, c := range cases {
		saved := maps.Clone(r.vars)
		err := r.match(r.decode(c.want), r.decode(c.got), "frame")
		if (err == nil) != c.ok {
			t.Errorf("%s against %s: %v, want ok=%v", c.got, c.want, err, c.ok)
		}
		if err != nil {
			r.vars = saved
		}
	}
	if r.vars["n"] != "5" || r.vars["s"] != `"y"` || r.vars["fresh"] != "" {
		t.Fatalf("bindings after the cases: %v", r.vars)
	}
}
