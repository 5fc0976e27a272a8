package storekit

import (
	"strings"
	"testing"
	"testing/fstest"
)

// restFromFirst is a step that writes a function and a view whose texts
// hold semicolons in a comment, a string, a quoted identifier, a block
// comment and a dollar-quoted body: the rest of the function after its
// first line is fnRest, that of the view viewRest.
const (
	fnRest        = "BEGIN\n\tRETURN x + length('$;'); -- not the end;\nEND\n$fn$;"
	viewRest      = "SELECT ';' AS \"a;b\" /* ; */, $$;$$ AS c\nFROM t; -- the end"
	restFromFirst = "-- step 1\nCREATE FUNCTION f(x int) RETURNS int LANGUAGE plpgsql AS $fn$\n" + fnRest +
		"\nCREATE VIEW v AS\n" + viewRest + "\nSELECT 1;\n"
)

// TestRestFromExpandsToTheNamedDefinition: a directive stands for the
// rest of the statement the named file begins with the line above it
// (OR REPLACE aside), and a file read through a directive is read
// expanded.
func TestRestFromExpandsToTheNamedDefinition(t *testing.T) {
	fsys := fstest.MapFS{
		"m/001_a.up.sql": {Data: []byte(restFromFirst)},
		"m/002_b.up.sql": {Data: []byte("DROP VIEW v;\nDROP FUNCTION f(int);\n")},
		"m/002_b.down.sql": {Data: []byte(`-- back to step 1
CREATE OR REPLACE FUNCTION f(x int) RETURNS int LANGUAGE plpgsql AS $fn$
-- herald:rest-from 001_a.up.sql

CREATE VIEW v AS
-- herald:rest-from 001_a.up.sql`)},
		"m/003_c.up.sql": {Data: []byte("DROP VIEW v;\n")},
		"m/003_c.down.sql": {Data: []byte(`CREATE VIEW v AS
-- herald:rest-from 002_b.down.sql
`)},
	}
	migs, err := ReadMigrations(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	if migs[0].SQL != restFromFirst {
		t.Fatalf("a step without directives reads as written: %q", migs[0].SQL)
	}
	want := "-- back to step 1\nCREATE OR REPLACE FUNCTION f(x int) RETURNS int LANGUAGE plpgsql AS $fn$\n" + fnRest +
		"\n\nCREATE VIEW v AS\n" + viewRest
	if migs[1].Down != want {
		t.Fatalf("down 2 =\n%s\nwant\n%s", migs[1].Down, want)
	}
	if want := "CREATE VIEW v AS\n" + viewRest + "\n"; migs[2].Down != want {
		t.Fatalf("down 3 (through down 2) =\n%s\nwant\n%s", migs[2].Down, want)
	}
}

// TestRestFromRefusals: a directive that cannot be expanded is an error
// naming the file and line, never a panic.
func TestRestFromRefusals(t *testing.T) {
	for name, c := range map[string]struct {
		up2  string
		more fstest.MapFS
		want string
	}{
		"missing file": {"CREATE VIEW v AS\n-- herald:rest-from 009_none.up.sql\n", nil,
			"storekit: migration 002_b.up.sql line 2: rest-from 009_none.up.sql: open m/009_none.up.sql: file does not exist"},
		"not in the directory": {"CREATE VIEW v AS\n-- herald:rest-from ../001_a.up.sql\n", nil,
			"migration 002_b.up.sql line 2: rest-from ../001_a.up.sql: want the name of a .sql file of the same directory"},
		"no such first line": {"CREATE VIEW w AS\n-- herald:rest-from 001_a.up.sql\n", nil,
			`migration 002_b.up.sql line 2: rest-from 001_a.up.sql: no line "CREATE VIEW w AS" there`},
		"written twice": {"SELECT 1;\n-- herald:rest-from 003_c.up.sql\n", fstest.MapFS{"m/003_c.up.sql": {Data: []byte("SELECT 1;\nSELECT 1;\n")}},
			`rest-from 003_c.up.sql: lines 1 and 2 are both "SELECT 1;": name a file that writes the statement once`},
		"never ended": {"CREATE VIEW v AS\n-- herald:rest-from 003_c.up.sql\n", fstest.MapFS{"m/003_c.up.sql": {Data: []byte("CREATE VIEW v AS\nSELECT $fn$;\n")}},
			"rest-from 003_c.up.sql: the statement of line 1: no semicolon ends it"},
		"ended inside a line": {"CREATE VIEW v AS\n-- herald:rest-from 003_c.up.sql\n", fstest.MapFS{"m/003_c.up.sql": {Data: []byte("CREATE VIEW v AS\nSELECT 1; SELECT 2;\n")}},
			`it ends on line 2 before "SELECT 2;"`},
		"self": {"CREATE VIEW v AS\nSELECT 1;\nCREATE VIEW v AS\n-- herald:rest-from 002_b.up.sql\n", nil,
			"rest-from cycle: 002_b.up.sql → 002_b.up.sql"},
		"cycle": {"CREATE VIEW v AS\n-- herald:rest-from 003_c.up.sql\n", fstest.MapFS{"m/003_c.up.sql": {Data: []byte("CREATE VIEW v AS\n-- herald:rest-from 002_b.up.sql\n")}},
			"rest-from cycle: 002_b.up.sql → 003_c.up.sql → 002_b.up.sql"},
		"nested refusal": {"CREATE VIEW v AS\n-- herald:rest-from 003_c.up.sql\n", fstest.MapFS{"m/003_c.up.sql": {Data: []byte("CREATE VIEW v AS\n-- herald:rest-from 001_a.up.sql\nCREATE VIEW w AS\n-- herald:rest-from 001_a.up.sql\n")}},
			`migration 002_b.up.sql line 2: rest-from 003_c.up.sql: migration 003_c.up.sql line 4: rest-from 001_a.up.sql: no line "CREATE VIEW w AS" there`},
		"first line": {"-- herald:rest-from 001_a.up.sql\n", nil,
			"migration 002_b.up.sql line 1: \"-- herald:rest-from 001_a.up.sql\" must follow the first line of the statement it completes"},
		"after a blank line": {"CREATE VIEW v AS\n\n-- herald:rest-from 001_a.up.sql\n", nil,
			"line 3: \"-- herald:rest-from 001_a.up.sql\" must follow the first line"},
		"after a directive": {"CREATE VIEW v AS\n-- herald:rest-from 001_a.up.sql\n-- herald:rest-from 001_a.up.sql\n", nil,
			"line 3: \"-- herald:rest-from 001_a.up.sql\" must follow the first line"},
		"unknown directive": {"CREATE VIEW v AS\n-- herald:include 001_a.up.sql\n", nil,
			`migration 002_b.up.sql line 2: "-- herald:include 001_a.up.sql": want a line of its own "-- herald:rest-from " followed by the name of a migration file`},
		"indented": {"CREATE VIEW v AS\n\t-- herald:rest-from 001_a.up.sql\n", nil,
			"want a line of its own"},
		"no file named": {"CREATE VIEW v AS\n-- herald:rest-from \n", nil,
			"want a line of its own"},
		"in a down check": {"SELECT 2;\n", fstest.MapFS{"m/002_b.down.sql": {Data: []byte("SELECT 1;\n")}, "m/002_b.downcheck.sql": {Data: []byte("CREATE VIEW x AS\n-- herald:rest-from 001_a.up.sql\n")}},
			`migration 002_b.downcheck.sql line 2: rest-from 001_a.up.sql: no line "CREATE VIEW x AS" there`},
	} {
		fsys := fstest.MapFS{
			"m/001_a.up.sql": {Data: []byte(restFromFirst)},
			"m/002_b.up.sql": {Data: []byte(c.up2)},
		}
		for k, v := range c.more {
			fsys[k] = v
		}
		if migs, err := ReadMigrations(fsys, "m"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ReadMigrations = %+v, %v; want an error saying %q", name, migs, err, c.want)
		}
	}
}
