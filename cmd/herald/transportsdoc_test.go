package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/heraldgw/herald/gateway"
)

// docs/transports.md records which transport each use takes and what the
// load balancers and platforms in front of Herald need. TestTransportsDoc
// keeps what it says of Herald itself true, as TestSettingsDoc does for
// docs/settings.md: the flags it names, the defaults it gives, the
// directives it quotes from deploy/, the rows of a use's record, the
// measurements it quotes from docs/performance.md, and every link, its
// and the ones pointing to it.

const (
	transportsDoc  = "../../docs/transports.md"
	performanceDoc = "../../docs/performance.md"
	nginxConfig    = "../../deploy/nginx/herald.conf"
	haproxyConfig  = "../../deploy/haproxy/herald.cfg"
)

// The documents that must link docs/transports.md.
var transportsLinkedFrom = []string{"../../README.md", "../../docs/protocol.md"}

func TestTransportsDoc(t *testing.T) {
	doc := readDoc(t, transportsDoc)

	t.Run("flags", func(t *testing.T) {
		known := map[string]bool{"config": true}
		for _, name := range commandWords() {
			if st := describeCommand(name); st != nil {
				for _, s := range st.list {
					known[s.name] = true
				}
			}
		}
		names := docFlags(doc)
		if len(names) == 0 {
			t.Fatalf("%s names no flag", transportsDoc)
		}
		for _, name := range names {
			if !known[name] {
				t.Errorf("%s names --%s, which no herald command has", transportsDoc, name)
			}
		}
	})

	t.Run("defaults", func(t *testing.T) {
		serve := map[string]setting{}
		for _, s := range describeCommand([]string{"serve"}).list {
			serve[s.name] = s
		}
		rows := settingRows(t, doc)
		for _, r := range rows {
			s, ok := serve[r.flag]
			if !ok {
				t.Errorf("%s: the settings table lists --%s, which herald serve does not have", transportsDoc, r.flag)
				continue
			}
			want := "empty"
			if v := s.value.String(); v != "" {
				want = "`" + v + "`"
			}
			if r.def != want {
				t.Errorf("%s: --%s defaults to %s, the table says %s", transportsDoc, r.flag, want, r.def)
			}
		}
	})

	t.Run("deploy-directives", func(t *testing.T) {
		nginx := configLines(t, nginxConfig)
		haproxy := configLines(t, haproxyConfig)
		all := append(slices.Clone(nginx), haproxy...)
		// Every code span that starts with a directive of either file is
		// that file's line, or the start of one.
		spans := codeSpans(doc)
		for _, span := range spans {
			first := strings.Fields(span)
			if len(first) == 0 {
				continue
			}
			var candidates []string
			for _, l := range all {
				if strings.Fields(l)[0] == first[0] {
					candidates = append(candidates, l)
				}
			}
			if len(candidates) == 0 {
				continue // not a directive of either file
			}
			quoted := strings.TrimSuffix(span, ";")
			if !slices.ContainsFunc(candidates, func(l string) bool { return l == quoted || strings.HasPrefix(l, quoted+" ") }) {
				t.Errorf("%s quotes `%s`, which neither deploy configuration has; they have:\n  %s", transportsDoc, span, strings.Join(candidates, "\n  "))
			}
		}
		// The idle timeouts, quoted with their values, and above the heartbeat
		// as much as the page asks.
		heartbeat := gateway.DefaultHeartbeatInterval
		for _, c := range []struct {
			file       string
			lines      []string
			directives []string
		}{
			{nginxConfig, nginx, []string{"proxy_read_timeout", "proxy_send_timeout"}},
			{haproxyConfig, haproxy, []string{"timeout client", "timeout server", "timeout tunnel"}},
		} {
			for _, d := range c.directives {
				i := slices.IndexFunc(c.lines, func(l string) bool { return strings.HasPrefix(l, d+" ") })
				if i < 0 {
					t.Errorf("%s has no %s", c.file, d)
					continue
				}
				line := c.lines[i]
				if !slices.Contains(spans, line) {
					t.Errorf("%s does not quote `%s` from %s", transportsDoc, line, c.file)
				}
				v, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(line, d)))
				if err != nil {
					t.Errorf("%s: %s: %v", c.file, line, err)
					continue
				}
				if v < 3*heartbeat {
					t.Errorf("%s: %s is under three heartbeats (%v), the least %s asks for", c.file, line, heartbeat, transportsDoc)
				}
			}
		}
	})

	t.Run("record", func(t *testing.T) {
		// A use's record says what polling would cost, what it measured,
		// what it must meet, how many connections, how it recovers, and
		// its transport with the platforms that carry it.
		_, rest, ok := strings.Cut(doc, "\n## Recording a use\n")
		if !ok {
			t.Fatalf("%s has no section \"Recording a use\"", transportsDoc)
		}
		section, _, _ := strings.Cut(rest, "\n## ")
		for _, row := range []string{"without realtime", "measured cost", "update target", "expected connections", "recovery", "transport", "platform support"} {
			if !strings.Contains(section, "\n| "+row+" | ") {
				t.Errorf("%s: the example record has no row %q", transportsDoc, row)
			}
		}
	})

	t.Run("measurements", func(t *testing.T) {
		perf := readDoc(t, performanceDoc)
		figures := regexp.MustCompile(`\d[\d,.]* KiB`).FindAllString(doc, -1)
		if len(figures) == 0 {
			t.Fatalf("%s quotes no memory figure", transportsDoc)
		}
		for _, f := range figures {
			if !strings.Contains(perf, f) {
				t.Errorf("%s quotes %s, which %s does not hold", transportsDoc, f, performanceDoc)
			}
		}
	})

	t.Run("links", func(t *testing.T) {
		links := docLinks(doc)
		if len(links) == 0 {
			t.Fatalf("%s has no link", transportsDoc)
		}
		for _, l := range links {
			if err := checkLink(transportsDoc, l); err != nil {
				t.Errorf("%s: %v", transportsDoc, err)
			}
		}
	})

	t.Run("linked-from", func(t *testing.T) {
		want, err := filepath.Abs(transportsDoc)
		if err != nil {
			t.Fatal(err)
		}
		for _, from := range transportsLinkedFrom {
			n := 0
			for _, l := range docLinks(readDoc(t, from)) {
				target, _, _ := strings.Cut(l, "#")
				if target == "" || isExternal(target) {
					continue
				}
				if p, err := filepath.Abs(filepath.Join(filepath.Dir(from), target)); err != nil || p != want {
					continue
				}
				n++
				if err := checkLink(from, l); err != nil {
					t.Errorf("%s: %v", from, err)
				}
			}
			if n == 0 {
				t.Errorf("%s does not link docs/transports.md", from)
			}
		}
	})
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// docFlags returns the names of the --flags doc mentions, once each.
func docFlags(doc string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?:^|[^\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)`).FindAllStringSubmatch(doc, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

type settingRow struct{ flag, def string }

// settingRows reads the rows of doc's table headed "| setting | default |".
func settingRows(t *testing.T, doc string) []settingRow {
	t.Helper()
	_, table, ok := strings.Cut(doc, "\n| setting | default |")
	if !ok {
		t.Fatalf("%s has no table headed | setting | default |", transportsDoc)
	}
	table, _, _ = strings.Cut(table, "\n\n")
	var rows []settingRow
	row := regexp.MustCompile("^\\| `--([a-z0-9-]+)` \\| ([^|]+) \\|")
	for _, line := range strings.Split(table, "\n")[2:] {
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("%s: a row of the settings table that does not start with `--flag` | default |: %s", transportsDoc, line)
			continue
		}
		rows = append(rows, settingRow{m[1], strings.TrimSpace(m[2])})
	}
	if len(rows) == 0 {
		t.Fatalf("%s: the settings table has no row", transportsDoc)
	}
	return rows
}

// configLines returns a proxy configuration's directives: its lines
// without comments, surrounding space and a final ";".
func configLines(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(readDoc(t, path), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, strings.TrimSuffix(l, ";"))
	}
	return out
}

// prose returns doc without its fenced code blocks.
func prose(doc string) string {
	var b strings.Builder
	fenced := false
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// codeSpans returns the `code spans` of doc's prose.
func codeSpans(doc string) []string {
	var out []string
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(prose(doc), -1) {
		out = append(out, m[1])
	}
	return out
}

// docLinks returns the targets of doc's inline links, outside code.
func docLinks(doc string) []string {
	text := regexp.MustCompile("`[^`\n]+`").ReplaceAllString(prose(doc), "")
	var out []string
	for _, m := range regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

func isExternal(target string) bool {
	return regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(target)
}

// checkLink says why the link target in the document at from does not
// resolve: no such file, or no such heading in the Markdown file it
// names. A link off the repository cannot be checked here, so none is
// allowed.
func checkLink(from, target string) error {
	if isExternal(target) {
		return fmt.Errorf("%s leaves the repository, which this test cannot check: name the page in words instead", target)
	}
	path, anchor, _ := strings.Cut(target, "#")
	file := from
	if path != "" {
		file = filepath.Join(filepath.Dir(from), path)
	}
	fi, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("%s: %w", target, err)
	}
	if anchor == "" {
		return nil
	}
	if fi.IsDir() || !strings.HasSuffix(file, ".md") {
		return fmt.Errorf("%s: an anchor into something that is not a Markdown file", target)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	anchors := headingAnchors(string(raw))
	if !anchors[anchor] {
		return fmt.Errorf("%s: %s has no heading with the anchor #%s", target, file, anchor)
	}
	return nil
}

// headingAnchors returns the anchors GitHub gives doc's headings: lower
// case, punctuation dropped, spaces as hyphens, "-1", "-2"… for repeats.
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	heading := regexp.MustCompile(`^#{1,6} +(.+?) *#* *$`)
	for _, l := range strings.Split(prose(doc), "\n") {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}
