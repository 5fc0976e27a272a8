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
	got, err := ReadMigrations(fsys, "m")
	if err != nil || len(got) != 2 || got[0].Version != 1 || got[0].Name != "outbox" || got[1].Name != "second step" || got[1].SQL != "SELECT 2;" {
		t.Fatalf("migrations = %+v, %v", got, err)
	}
	for name, c := range map[string]struct {
		files fstest.MapFS
		want  string
	}{
		"gap":      {fstest.MapFS{"m/001_a.up.sql": {}, "m/003_c.up.sql": {}}, "migration 3 (c) where 2 was expected"},
		"repeated": {fstest.MapFS{"m/001_a.up.sql": {}, "m/001_b.up.sql": {}}, "where 2 was expected"},
		"pattern":  {fstest.MapFS{"m/1_a.up.sql": {}}, `"1_a.up.sql": want NNN_name.up.sql`},
		"suffix":   {fstest.MapFS{"m/001_a.sql": {}}, `"001_a.sql": want NNN_name.up.sql`},
		"no dir":   {fstest.MapFS{"n/001_a.up.sql": {}}, "storekit: migrations: "},
	} {
		if migs, err := ReadMigrations(c.files, "m"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ReadMigrations = %+v, %v; want an error saying %q", name, migs, err, c.want)
		}
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
	migs, err := ReadMigrations(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
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
	for name, c := range map[string]struct {
		files fstest.MapFS
		want  string
	}{
		"down without up":    {fstest.MapFS{"m/001_a.up.sql": {}, "m/002_b.down.sql": {}}, `"002_b.down.sql" has no 002_b.up.sql`},
		"check without down": {fstest.MapFS{"m/001_a.up.sql": {}, "m/001_a.downcheck.sql": {Data: []byte("SELECT 1;")}}, "migration 1 (a) has a down check but no down step"},
	} {
		if migs, err := ReadMigrations(c.files, "m"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ReadMigrations = %+v, %v; want an error saying %q", name, migs, err, c.want)
		}
	}
}
