package clientjs

import (
	"io/fs"
	"path"
	"regexp"
	"testing"
)

// importRE finds the static and dynamic imports of a module ("./x.js").
var importRE = regexp.MustCompile(`(?:from|import)\s*\(?\s*"(\./[^"]+)"`)

// TestFSServesEveryImportedModule checks that the entry modules and every
// module they import, statically or dynamically, are in FS.
func TestFSServesEveryImportedModule(t *testing.T) {
	seen := map[string]bool{}
	var visit func(name string)
	visit = func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		b, err := fs.ReadFile(FS, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, m := range importRE.FindAllStringSubmatch(string(b), -1) {
			visit(path.Clean(path.Join(path.Dir(name), m[1])))
		}
	}
	for _, entry := range []string{"herald.js", "sse.js", "ws.js"} {
		visit(entry)
	}
	for _, want := range []string{"core.js", "eventsource.js"} {
		if !seen[want] {
			t.Errorf("no entry module imports %s", want)
		}
	}
}
