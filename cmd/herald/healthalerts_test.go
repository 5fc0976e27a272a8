package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// healthGaugeRE finds the health gauges of docs/metrics.md: the gauges
// named *_up or *_healthy, which are 1 while a part works and 0 while it
// does not.
var healthGaugeRE = regexp.MustCompile("(?m)^\\| `(herald_[a-z0-9_]+_(?:up|healthy))` \\| gauge \\|")

// TestHealthGaugesAlert: every health gauge docs/metrics.md documents is
// watched by an alert of the rule files of docs/alerts (the outbox's as
// written for a config without handlers, and the gateway's) that waits
// before it fires (`for` above 0: a health check fails for a moment now
// and then) and links a page of docs/ that exists. A new health gauge
// without an alert fails it.
func TestHealthGaugesAlert(t *testing.T) {
	raw, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	var gauges []string
	for _, m := range healthGaugeRE.FindAllStringSubmatch(string(raw), -1) {
		gauges = append(gauges, m[1])
	}
	if len(gauges) < 5 {
		t.Fatalf("found %d health gauges in %s (%v): the table's format changed?", len(gauges), metricsDoc, gauges)
	}
	files, err := filepath.Glob("../../docs/alerts/*.rules.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files in docs/alerts (%v)", err)
	}
	watched := map[string][]string{} // gauge → alerts naming it
	for _, f := range files {
		for name, r := range alertingRulesIn(t, f) {
			for _, g := range gauges {
				if !regexp.MustCompile(`\b` + g + `\b`).MatchString(r.expr) {
					continue
				}
				watched[g] = append(watched[g], name)
				if r.forDur == "" || strings.Trim(r.forDur, "0smh") == "" {
					t.Errorf("%s: %s watches %s without waiting (for %q)", f, name, g, r.forDur)
				}
				const prefix = "https://github.com/heraldgw/herald/blob/main/"
				page, _, _ := strings.Cut(strings.TrimPrefix(r.runbook, prefix), "#")
				if !strings.HasPrefix(r.runbook, prefix+"docs/") {
					t.Errorf("%s: %s: runbook_url %q is not a page of docs/", f, name, r.runbook)
				} else if _, err := os.Stat(filepath.Join("../..", page)); err != nil {
					t.Errorf("%s: %s: runbook: %v", f, name, err)
				}
			}
		}
	}
	for _, g := range gauges {
		if len(watched[g]) == 0 {
			t.Errorf("health gauge %s has no alert in docs/alerts: add one (with for: and a runbook_url)", g)
			continue
		}
		slices.Sort(watched[g])
		t.Logf("%s: %v", g, slices.Compact(watched[g]))
	}
}
