package storetest

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/heraldgw/herald/outboxfeed/internal/storekit"
)

// CheckMigrationFiles fails unless the migration files of dir in fsys
// were read without error (err and migs, from storekit.ReadMigrations):
// a step for every up file, a down step for every down file, a check for
// every down check file, and no "-- herald:" directive left unexpanded in
// what the store executes.
func CheckMigrationFiles(t *testing.T, fsys fs.FS, dir string, migs []storekit.Migration, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("the migration files of %s: %v", dir, err)
	}
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]int{}
	for _, e := range entries {
		for _, suffix := range []string{".up.sql", ".down.sql", ".downcheck.sql"} {
			if strings.HasSuffix(e.Name(), suffix) {
				files[suffix]++
			}
		}
	}
	read := map[string]int{".up.sql": len(migs)}
	for _, m := range migs {
		for what, text := range map[string]string{"up": m.SQL, "down": m.Down, "down check": m.DownCheck} {
			for i, line := range strings.Split(text, "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "-- herald:") {
					t.Errorf("migration %d (%s), %s, line %d: directive left unexpanded: %q", m.Version, m.Name, what, i+1, line)
				}
			}
		}
		if m.SQL == "" {
			t.Errorf("migration %d (%s) executes nothing", m.Version, m.Name)
		}
		if m.Down != "" {
			read[".down.sql"]++
		}
		if m.DownCheck != "" {
			read[".downcheck.sql"]++
		}
	}
	for suffix, n := range files {
		if read[suffix] != n {
			t.Errorf("%s has %d %s files, the migrations read %d", dir, n, suffix, read[suffix])
		}
	}
}
