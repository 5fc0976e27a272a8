package fanout

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

var compactCases = []string{
	``, ` `, `null`, `true`, `false`, `nul`, `truex`, `0`, `-0`, `01`, `-`, `1.`, `1.5`, `1e`, `1e+`, `1E-7`, `-12.5e10`,
	`""`, `"a`, `"\u00e9\n\"\\\/"`, `"\x"`, `"\u12"`, "\"tab\tin\"", "\"\xff\"",
	`[]`, `[ ]`, `[1,]`, `[,1]`, `[1 2]`, ` [ 1 , [ 2 , { } ] ] `, `{}`, `{ }`, `{"a":1}`, `{"a" : [true, null] , "b":{"c":"d"}}`,
	`{"a"}`, `{"a":}`, `{a:1}`, `{"a":1,}`, `{"a":1 "b":2}`, `[}`, `{]`, `[1]]`, `{"a":1}}`, `1 2`, "\n{\r\n\t\"k\" :\t-1\n}\n",
	strings.Repeat("[", 100) + strings.Repeat("]", 100),
	strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1),
}

func TestAppendCompactJSONMatchesEncodingJSON(t *testing.T) {
	for _, in := range compactCases {
		checkCompactLikeEncodingJSON(t, []byte(in))
	}
}

func checkCompactLikeEncodingJSON(t *testing.T, in []byte) {
	t.Helper()
	var want bytes.Buffer
	wantErr := json.Compact(&want, in)
	got, ok := appendCompactJSON([]byte("prefix:"), in)
	if ok != (wantErr == nil) {
		t.Fatalf("%.60q: ok = %v, encoding/json error = %v", in, ok, wantErr)
	}
	if !ok {
		if string(got) != "prefix:" {
			t.Fatalf("%.60q: dst changed on failure: %q", in, got)
		}
		return
	}
	if string(got) != "prefix:"+want.String() {
		t.Fatalf("%.60q: got %q, want %q", in, got, want.String())
	}
}

func FuzzAppendCompactJSON(f *testing.F) {
	for _, in := range compactCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkCompactLikeEncodingJSON(t, in)
	})
}
