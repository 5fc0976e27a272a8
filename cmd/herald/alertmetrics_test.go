package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
)

const grafanaDashboard = "../../docs/grafana/herald.json"

// metricIdentRE finds, loosely, the metric names a PromQL expression
// uses: Herald's own and the Go and process collectors'.
var metricIdentRE = regexp.MustCompile(`\b(?:herald|go|process)_[a-z0-9_]+`)

// dashboardExprs returns every PromQL query of the dashboard: the panels'
// targets (rows included) and the template variables' queries.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(grafanaDashboard)
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Expr string `json:"expr"`
	}
	type panel struct {
		Title   string   `json:"title"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", grafanaDashboard, err)
	}
	var out []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("%s: panel %q has a target without expr", grafanaDashboard, p.Title)
				}
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if json.Unmarshal(v.Query, &s) == nil {
				q.Query = s
			}
		}
		out = append(out, q.Query)
	}
	return out
}

// ruleExprs returns the expr of every rule in docs/alerts/*.rules.yml and
// docs/alerts/examples/*.rules.yml (the files keep each expr on one line).
func ruleExprs(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("../../docs/alerts/*.rules.yml")
	examples, err2 := filepath.Glob("../../docs/alerts/examples/*.rules.yml")
	if err != nil || err2 != nil || len(files) == 0 || len(examples) == 0 {
		t.Fatalf("no rule files in docs/alerts or docs/alerts/examples (%v, %v)", err, err2)
	}
	files = append(files, examples...)
	out := map[string][]string{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(string(raw), "\n") {
			if e, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:"); ok {
				out[f] = append(out[f], strings.TrimSpace(e))
			}
		}
		if len(out[f]) == 0 {
			t.Fatalf("%s: no expr lines", f)
		}
	}
	return out
}

// scrapeFamilies reads a /metrics page's "# TYPE name type" lines.
func scrapeFamilies(t *testing.T, url string) map[string]string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	fams := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			fams[f[2]] = f[3]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return fams
}

// hasMetric reports whether name is a family of the scrape, or a series
// of one: name_bucket, _sum, _count of a histogram (_sum, _count of a
// summary).
func hasMetric(fams map[string]string, name string) bool {
	if _, ok := fams[name]; ok {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suf)
		if !ok {
			continue
		}
		switch fams[base] {
		case "histogram":
			return true
		case "summary":
			return suf != "_bucket"
		}
	}
	return false
}

// TestAlertMetricsExist starts a node with every part that registers
// metrics (PostgreSQL store with the Worker and Pruner, Redis broker) and
// checks that every metric an alert rule or a dashboard query names is on
// its /metrics page, so neither can silently watch a metric that does not
// exist.
func TestAlertMetricsExist(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	base := startServe(t, "--database-url", testenv.DatabaseURL(t), "--redis-url", redisURL, "--redis-key-prefix", prefix)
	waitReady(t, base) // the Worker has claimed once and the backlog gauges are set
	fams := scrapeFamilies(t, base+"/metrics")

	sources := ruleExprs(t)
	sources[grafanaDashboard] = dashboardExprs(t)
	var used []string
	for src, exprs := range sources {
		if len(exprs) == 0 {
			t.Errorf("%s: no queries found", src)
		}
		for _, e := range exprs {
			names := metricIdentRE.FindAllString(e, -1)
			if len(names) == 0 {
				t.Errorf("%s: query names no metric: %s", src, e)
			}
			for _, n := range names {
				used = append(used, n)
				if !hasMetric(fams, n) {
					t.Errorf("%s: metric %s is not exported by herald serve (query: %s)", src, n, e)
				}
			}
		}
	}
	slices.Sort(used)
	used = slices.Compact(used)
	t.Logf("%d metric names checked: %v", len(used), used)
}
