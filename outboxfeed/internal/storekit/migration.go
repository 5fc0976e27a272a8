package storekit

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Migration is one versioned step of a store's schema: a file
// NNN_name_in_words.up.sql of its migration directory. Applied versions
// are recorded with their name ("name in words"); a step never changes
// once released (add a new one instead).
//
// A step that can be reversed has a NNN_name_in_words.down.sql beside it
// (Down): it takes the schema back to the version before, moving any
// record in flight so that none is lost or repeated. It may also have a
// NNN_name_in_words.downcheck.sql (DownCheck): a query returning one text
// row for each reason the step cannot be reversed now, with what to do
// about it (a Worker of this release still holds a lease, say); the step
// is reversed only when it returns none. A step without a down file
// cannot be reversed (see ErrIrreversible).
//
// A file may bring back a definition another file wrote without writing
// it again (see restFromPrefix): SQL, Down and DownCheck are the texts the
// store executes, with those directives expanded. A file another names
// is part of what that step executes, so it never changes once released
// either.
type Migration struct {
	Version   int
	Name      string
	SQL       string
	Down      string
	DownCheck string
}

// The suffixes of a migration's files.
const (
	upSuffix        = ".up.sql"
	downSuffix      = ".down.sql"
	downCheckSuffix = ".downcheck.sql"
)

// ReadMigrations reads the migrations of dir in fsys, in version order,
// with their rest-from directives expanded (see restFromPrefix). It
// refuses a file whose name does not follow the pattern, a gap, a
// repeated version, a down or check file without its up file, and a
// directive it cannot expand, naming the file: the files are embedded,
// so that is a build mistake, which each store's tests report.
func ReadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("storekit: migrations: %w", err)
	}
	e := &expander{fsys: fsys, dir: dir, done: map[string]string{}}
	read := func(name string) (string, error) {
		s, err := e.file(name)
		if err != nil {
			return "", fmt.Errorf("storekit: %w", err)
		}
		return s, nil
	}
	byBase := map[string]*Migration{}
	var out []*Migration
	var extra []string // the down and check files
	for _, ent := range entries {
		name := ent.Name()
		if strings.HasSuffix(name, downSuffix) || strings.HasSuffix(name, downCheckSuffix) {
			extra = append(extra, name)
			continue
		}
		base, ok := strings.CutSuffix(name, upSuffix)
		num, words, ok2 := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || !ok2 || err != nil || len(num) != 3 {
			return nil, fmt.Errorf("storekit: migration file %q: want NNN_name.up.sql", name)
		}
		sql, err := read(name)
		if err != nil {
			return nil, err
		}
		m := &Migration{Version: v, Name: strings.ReplaceAll(words, "_", " "), SQL: sql}
		byBase[base] = m
		out = append(out, m)
	}
	for _, name := range extra {
		base, isCheck := strings.CutSuffix(name, downCheckSuffix)
		if !isCheck {
			base = strings.TrimSuffix(name, downSuffix)
		}
		m, ok := byBase[base]
		if !ok {
			return nil, fmt.Errorf("storekit: migration file %q has no %s%s", name, base, upSuffix)
		}
		sql, err := read(name)
		if err != nil {
			return nil, err
		}
		if isCheck {
			m.DownCheck = sql
		} else {
			m.Down = sql
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	res := make([]Migration, len(out))
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("storekit: migration %d (%s) where %d was expected", m.Version, m.Name, i+1)
		}
		if m.DownCheck != "" && m.Down == "" {
			return nil, fmt.Errorf("storekit: migration %d (%s) has a down check but no down step", m.Version, m.Name)
		}
		res[i] = *m
	}
	return res, nil
}

// ErrIrreversible is wrapped by DownSteps when a step on the way has no
// down step.
var ErrIrreversible = errors.New("cannot be reversed")

// DownSteps returns the steps to reverse, newest first, to take a schema
// whose applied versions are applied (as read from its
// schema_migrations) back to version to. The applied versions must be
// 1..n with no gap; to must be below n. The error for a step on the way
// without a down step wraps ErrIrreversible and names it.
func DownSteps(migs []Migration, applied []int, to int) ([]Migration, error) {
	cur, err := Current(applied)
	if err != nil {
		return nil, err
	}
	switch {
	case cur > len(migs):
		return nil, fmt.Errorf("the schema is at version %d, newer than this release knows (%d): take it back with the release that took it there", cur, len(migs))
	case to < 0 || to >= cur:
		return nil, fmt.Errorf("version %d: want a version below the schema's, %d", to, cur)
	}
	var steps []Migration
	for v := cur; v > to; v-- {
		m := migs[v-1]
		if m.Down == "" {
			return nil, fmt.Errorf("migration %d (%s) %w", m.Version, m.Name, ErrIrreversible)
		}
		steps = append(steps, m)
	}
	return steps, nil
}

// Current is the version of a schema whose applied versions are applied:
// the highest, when they are 1..n with no gap.
func Current(applied []int) (int, error) {
	s := slices.Sorted(slices.Values(applied))
	for i, v := range s {
		if v != i+1 {
			return 0, fmt.Errorf("the schema's applied versions %v are not 1 to %d: it was changed by hand", s, len(s))
		}
	}
	return len(s), nil
}
