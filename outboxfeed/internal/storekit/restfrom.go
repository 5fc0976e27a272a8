package storekit

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
)

// A migration file writes each definition (function, view, trigger) in
// full once: a later step that brings back a definition an earlier file
// wrote (a down step restoring what it replaced, say) writes the first
// line of the statement and, on the line below, a rest-from directive
// naming that file:
//
//	CREATE FUNCTION herald.outbox_claim(p_part int, p_owner text, p_lease interval, p_limit int, p_tries int, p_range_limit int)
//	-- herald:rest-from 006_ranges_in_staging_order.up.sql
//
// The directive line stands for the lines that follow that first line in
// the named file, up to the end of its statement (the line of the
// statement's closing semicolon): the file must have exactly one line
// equal to it, but for OR REPLACE after CREATE (the step says which it
// needs). The named file is read with its own directives expanded; it
// may not lead back to the file being read. What a store executes is the
// expanded text (Migration.SQL, Down, DownCheck), the same as if the
// lines had been copied.
const (
	directivePrefix = "-- herald:"
	restFromPrefix  = directivePrefix + "rest-from "
)

// expander expands the directives of the files of one migration
// directory.
type expander struct {
	fsys fs.FS
	dir  string
	done map[string]string // expanded text, by file name
	open []string          // the files being expanded, outermost first
}

// file is the text of the file name of the directory, expanded.
func (e *expander) file(name string) (string, error) {
	if s, ok := e.done[name]; ok {
		return s, nil
	}
	if i := slices.Index(e.open, name); i >= 0 {
		return "", fmt.Errorf("rest-from cycle: %s", strings.Join(append(slices.Clone(e.open[i:]), name), " → "))
	}
	b, err := fs.ReadFile(e.fsys, path.Join(e.dir, name))
	if err != nil {
		return "", err
	}
	e.open = append(e.open, name)
	s, err := e.expand(name, string(b))
	e.open = e.open[:len(e.open)-1]
	if err != nil {
		return "", err
	}
	e.done[name] = s
	return s, nil
}

// expand replaces the directives of text, the content of file name.
func (e *expander) expand(name, text string) (string, error) {
	if !strings.Contains(text, directivePrefix) {
		return text, nil
	}
	lines := strings.Split(text, "\n")
	out := make([]string, 0, len(lines))
	for i, line := range lines {
		if !strings.HasPrefix(strings.TrimSpace(line), directivePrefix) {
			out = append(out, line)
			continue
		}
		src, ok := strings.CutPrefix(line, restFromPrefix)
		if !ok || src == "" {
			return "", fmt.Errorf("migration %s line %d: %q: want a line of its own %q followed by the name of a migration file", name, i+1, line, restFromPrefix)
		}
		if i == 0 || strings.TrimSpace(lines[i-1]) == "" || strings.HasPrefix(strings.TrimSpace(lines[i-1]), directivePrefix) {
			return "", fmt.Errorf("migration %s line %d: %q must follow the first line of the statement it completes", name, i+1, line)
		}
		rest, err := e.restFrom(src, lines[i-1])
		if err != nil {
			return "", fmt.Errorf("migration %s line %d: rest-from %s: %w", name, i+1, src, err)
		}
		out = append(out, rest...)
	}
	return strings.Join(out, "\n"), nil
}

// restFrom is the rest of the statement whose first line is first in
// file src: its lines after first, up to the one that ends it.
func (e *expander) restFrom(src, first string) ([]string, error) {
	if strings.ContainsAny(src, `/\`) || !strings.HasSuffix(src, ".sql") {
		return nil, errors.New("want the name of a .sql file of the same directory")
	}
	text, err := e.file(src)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(text, "\n")
	at := -1
	for i, l := range lines {
		if sameFirstLine(l, first) {
			if at >= 0 {
				return nil, fmt.Errorf("lines %d and %d are both %q: name a file that writes the statement once", at+1, i+1, first)
			}
			at = i
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("no line %q there (OR REPLACE after CREATE aside)", first)
	}
	end, err := statementEnd(lines, at)
	if err != nil {
		return nil, fmt.Errorf("the statement of line %d: %w", at+1, err)
	}
	return lines[at+1 : end+1], nil
}

// sameFirstLine reports whether a and b are the same first line of a
// statement, OR REPLACE after CREATE aside.
func sameFirstLine(a, b string) bool {
	norm := func(s string) string {
		if rest, ok := strings.CutPrefix(s, "CREATE OR REPLACE "); ok {
			return "CREATE " + rest
		}
		return s
	}
	return norm(a) == norm(b)
}

// dollarTag is the delimiter of a dollar-quoted string ($fn$, $$).
var dollarTag = regexp.MustCompile(`^\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$`)

// statementEnd is the line of the semicolon that ends the statement
// beginning at line from: the first outside a string, quoted identifier,
// dollar-quoted body or comment. Only a comment may follow it on its
// line.
func statementEnd(lines []string, from int) (int, error) {
	closing := "" // the delimiter that ends the quoted text or comment we are in
	for i := from; i < len(lines); i++ {
		l := lines[i]
		for k := 0; k < len(l); {
			if closing != "" {
				n := strings.Index(l[k:], closing)
				if n < 0 {
					break
				}
				k += n + len(closing)
				closing = ""
				continue
			}
			switch c := l[k]; {
			case strings.HasPrefix(l[k:], "--"):
				k = len(l)
			case strings.HasPrefix(l[k:], "/*"):
				closing, k = "*/", k+2
			case c == '\'' || c == '"':
				closing, k = string(c), k+1
			case c == '$' && dollarTag.MatchString(l[k:]):
				closing = dollarTag.FindString(l[k:])
				k += len(closing)
			case c == ';':
				if after := strings.TrimSpace(l[k+1:]); after != "" && !strings.HasPrefix(after, "--") {
					return 0, fmt.Errorf("it ends on line %d before %q: end it at the end of its line", i+1, after)
				}
				return i, nil
			default:
				k++
			}
		}
	}
	return 0, errors.New("no semicolon ends it")
}
