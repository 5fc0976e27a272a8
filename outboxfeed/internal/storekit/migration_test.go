package storekit

import (
	"testing"
	"testing/fstest"
)

func TestMigrationsReadInVersionOrder(t *testing.T) {
	fsys := fstest.MapFS{
		"m/002_second_step.up.sql": {Data: []byte("SELECT 2;")},
		"m/001_outbox.up.sql":      {Data: []byte("SELECT 1;")},
	}
	got := Migrations(fsys, "m")
	if len(got) != 2 || got[0].Version != 1 || got[0].Name != "outbox" || got[1].Name != "second step" || got[1].SQL != "SELECT 2;" {
		t.Fatalf("migrations = %+v", got)
	}
	for name, files := range map[string]fstest.MapFS{
		"gap":     {"m/001_a.up.sql": {}, "m/003_c.up.sql": {}},
		"pattern": {"m/1_a.up.sql": {}},
		"suffix":  {"m/001_a.sql": {}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			Migrations(files, "m")
		}()
	}
}
