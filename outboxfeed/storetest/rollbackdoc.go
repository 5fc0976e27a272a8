package storetest

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/heraldgw/herald/outboxfeed/internal/storekit"
)

// RollbackDoc is the runbook that says which schema steps go back.
const RollbackDoc = "../../docs/runbooks/rollback-schema.md"

// CheckRollbackDoc fails unless the table "Which steps go back" of
// RollbackDoc has, for store (its first column), a row for every one of
// migs, by version ("7") or range ("1–5"), naming the step ("step" column,
// the steps of a range separated by commas) and saying "yes" exactly for
// those with a down step.
func CheckRollbackDoc(t *testing.T, store string, migs []storekit.Migration) {
	t.Helper()
	b, err := os.ReadFile(RollbackDoc)
	if err != nil {
		t.Fatalf("read %s: %v", RollbackDoc, err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## Which steps go back\n")
	if !ok {
		t.Fatalf("%s has no section \"Which steps go back\"", RollbackDoc)
	}
	section, _, _ := strings.Cut(rest, "\n## ")
	seen := map[int]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 4 || cells[0] != store {
			continue
		}
		from, to, isRange := strings.Cut(cells[1], "–")
		lo, err1 := strconv.Atoi(from)
		hi, err2 := lo, error(nil)
		if isRange {
			hi, err2 = strconv.Atoi(to)
		}
		if err1 != nil || err2 != nil || lo < 1 || hi > len(migs) || lo > hi {
			t.Errorf("%s: %s row %q: versions %q, want within 1 to %d", RollbackDoc, store, line, cells[1], len(migs))
			continue
		}
		names := strings.Split(cells[2], ", ")
		if len(names) != hi-lo+1 {
			t.Errorf("%s: %s row %q names %d steps for versions %s", RollbackDoc, store, line, len(names), cells[1])
			continue
		}
		yes := strings.HasPrefix(cells[3], "yes")
		for v := lo; v <= hi; v++ {
			m := migs[v-1]
			seen[v] = true
			if names[v-lo] != m.Name {
				t.Errorf("%s: %s version %d is %q, the row says %q", RollbackDoc, store, v, m.Name, names[v-lo])
			}
			if (m.Down != "") != yes {
				t.Errorf("%s: %s version %d (%s): down step %v, the row says %q", RollbackDoc, store, v, m.Name, m.Down != "", cells[3])
			}
		}
	}
	for v := 1; v <= len(migs); v++ {
		if !seen[v] {
			t.Errorf("%s: no %s row for version %d (%s)", RollbackDoc, store, v, migs[v-1].Name)
		}
	}
}
