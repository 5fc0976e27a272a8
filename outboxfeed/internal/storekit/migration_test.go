package storekit

import (
	"errors"
	"strings"
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

func TestMigrationsDownSteps(t *testing.T) {
	fsys := fstest.MapFS{
		"m/001_outbox.up.sql":       {Data: []byte("SELECT 1;")},
		"m/002_second.up.sql":       {Data: []byte("SELECT 2;")},
		"m/002_second.down.sql":     {Data: []byte("SELECT -2;")},
		"m/003_third.up.sql":        {Data: []byte("SELECT 3;")},
		"m/003_third.down.sql":      {Data: []byte("SELECT -3;")},
		"m/003_third.downcheck.sql": {Data: []byte("SELECT 'no';")},
	}
	migs := Migrations(fsys, "m")
	if migs[0].Down != "" || migs[1].Down != "SELECT -2;" || migs[1].DownCheck != "" || migs[2].Down != "SELECT -3;" || migs[2].DownCheck != "SELECT 'no';" {
		t.Fatalf("migrations = %+v", migs)
	}
	steps, err := DownSteps(migs, []int{3, 1, 2}, 1)
	if err != nil || len(steps) != 2 || steps[0].Version != 3 || steps[1].Version != 2 {
		t.Fatalf("DownSteps(3 → 1) = %+v, %v; want 3 then 2", steps, err)
	}
	if _, err := DownSteps(migs, []int{1, 2, 3}, 0); !errors.Is(err, ErrIrreversible) || !strings.Contains(err.Error(), "migration 1 (outbox)") {
		t.Fatalf("DownSteps(3 → 0) = %v, want migration 1 irreversible", err)
	}
	for name, c := range map[string]struct {
		applied []int
		to      int
	}{
		"gap":         {[]int{1, 3}, 1},
		"not below":   {[]int{1, 2}, 2},
		"newer":       {[]int{1, 2, 3, 4}, 3},
		"negative to": {[]int{1, 2}, -1},
	} {
		if _, err := DownSteps(migs, c.applied, c.to); err == nil || errors.Is(err, ErrIrreversible) {
			t.Errorf("%s: DownSteps = %v, want a refusal", name, err)
		}
	}
	for name, files := range map[string]fstest.MapFS{
		"down without up":    {"m/001_a.up.sql": {}, "m/002_b.down.sql": {}},
		"check without down": {"m/001_a.up.sql": {}, "m/001_a.downcheck.sql": {Data: []byte("SELECT 1;")}},
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
