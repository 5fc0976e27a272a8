package storekit

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one versioned step of a store's schema: a file
// NNN_name_in_words.up.sql of its migration directory. Applied versions
// are recorded with their name ("name in words"); a step never changes
// once released (add a new one instead).
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations reads the migrations of dir in fsys, in version order. It
// panics on a file whose name does not follow the pattern, a gap or a
// repeated version: the files are embedded, so that is a build mistake.
func Migrations(fsys fs.FS, dir string) []Migration {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		panic(fmt.Sprintf("storekit: migrations: %v", err))
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		base, ok := strings.CutSuffix(name, ".up.sql")
		num, words, ok2 := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || !ok2 || err != nil || len(num) != 3 {
			panic(fmt.Sprintf("storekit: migration file %q: want NNN_name.up.sql", name))
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			panic(fmt.Sprintf("storekit: migration %s: %v", name, err))
		}
		out = append(out, Migration{Version: v, Name: strings.ReplaceAll(words, "_", " "), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			panic(fmt.Sprintf("storekit: migration %d (%s) where %d was expected", m.Version, m.Name, i+1))
		}
	}
	return out
}
