package jsonstr

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAppendMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "a\"b\\c", "\x00\x1f\x7f", "\u2028\u2029", "日本語", "<>&", "\xff\xfe", "mixed \t\n\r\b\f end"} {
		want, _ := json.Marshal(s)
		// encoding/json escapes <, > and & for HTML; the envelope does not.
		wantStr := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(want))
		if got := string(Append(nil, s)); got != wantStr {
			t.Errorf("Append(%q) = %s, want %s", s, got, wantStr)
		}
	}
}

func FuzzAppend(f *testing.F) {
	for _, s := range []string{"", "x", "\"\\", "\x00", "\u2028", "\xff", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Append(nil, s)
		var got, want string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q encoded as invalid JSON %s: %v", s, out, err)
		}
		raw, _ := json.Marshal(s)
		_ = json.Unmarshal(raw, &want)
		if got != want {
			t.Fatalf("%q decodes as %q, encoding/json gives %q", s, got, want)
		}
	})
}
