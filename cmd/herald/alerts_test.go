package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	deliveryDoc = "../../docs/delivery.md"
	alertRules  = "../../docs/alerts/herald-outbox.rules.yml"
	metricsDoc  = "../../docs/metrics.md"
	// alertsExample is a config with a webhook handler; its rules are
	// checked in beside it.
	alertsExample      = "../../docs/alerts/examples/billing-webhook.yaml"
	alertsExampleRules = "../../docs/alerts/examples/billing-webhook.rules.yml"
)

// runAlertsCmd runs herald alerts with args and returns its output.
func runAlertsCmd(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), append([]string{"alerts"}, args...), &out, &errb); code != 0 {
		t.Fatalf("herald alerts %v: exit %d: %s", args, code, errb.String())
	}
	return out.String()
}

// TestAlertsGenerated keeps the checked-in rule files the output of
// `herald alerts`: docs/alerts/herald-outbox.rules.yml with no handler
// configured, and the webhook example's. -update rewrites them.
func TestAlertsGenerated(t *testing.T) {
	for _, c := range []struct {
		file string
		args []string
	}{
		{alertRules, nil},
		{alertsExampleRules, []string{"--config", alertsExample}},
	} {
		got := runAlertsCmd(t, c.args...)
		raw, err := os.ReadFile(c.file)
		if err != nil && !*updateDocs {
			t.Fatal(err)
		}
		if string(raw) == got {
			continue
		}
		if *updateDocs {
			if err := os.WriteFile(c.file, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s is not the output of herald alerts %s; run: go test ./cmd/herald -run TestAlertsGenerated -update",
			c.file, strings.Join(c.args, " "))
	}
}

// TestAlertsFromTargets checks that each handler's delivery targets are
// the thresholds of its alerts, that --out writes the file, and that a
// target_p99 the dispatch histogram cannot measure is refused.
func TestAlertsFromTargets(t *testing.T) {
	out := filepath.Join(t.TempDir(), "rules.yml")
	handlers := `[{"name":"realtime","type":"realtime","max_dead_letters":3},` +
		`{"name":"hooks","type":"webhook","url":"https://hooks.example/in","secret":"whsec_eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHg=",` +
		`"target_p99":"750ms","max_backlog_age":"90m"}]`
	if got := runAlertsCmd(t, "--handlers", handlers, "--out", out); got != "" {
		t.Fatalf("with --out, standard output is %q", got)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rules := string(raw)
	for _, want := range []string{
		`- name: herald-outbox-handler-realtime`,
		`max(herald_outbox_dead_letter{handler="realtime"}) > 3` + "\n",
		`rate(herald_outbox_dispatch_duration_seconds_bucket{handler="realtime"}[5m]))) > 5` + "\n",
		`- name: herald-outbox-handler-hooks`,
		`rate(herald_outbox_dispatch_duration_seconds_bucket{handler="hooks"}[5m]))) > 0.75` + "\n",
		`max(herald_outbox_oldest_pending_age_seconds{handler="hooks"}) > 5400` + "\n",
		`max(herald_outbox_dead_letter{handler="hooks"}) > 0` + "\n",
		`max(herald_outbox_handler_disabled{handler="hooks"}) == 1` + "\n",
		`summary: "Handler hooks: records wait longer than 1h30m (max_backlog_age)"`,
		"runbook_url: " + runbookBase + "webhook-endpoint.md",
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("rules lack %q:\n%s", want, rules)
		}
	}
	if strings.Contains(rules, `herald_outbox_handler_disabled{handler="realtime"}`) {
		t.Errorf("realtime, which is never disabled, has a disabled alert:\n%s", rules)
	}

	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"alerts", "--handlers", `[{"name":"realtime","type":"realtime","target_p99":"30s"}]`}, &stdout, &stderr)
	const want = "handlers[0] (realtime): target_p99: 30s: want more than 0 and at most 10s (the largest bucket of herald_outbox_dispatch_duration_seconds)"
	if code != 1 || !strings.Contains(stderr.String(), want) {
		t.Fatalf("target_p99 30s: exit %d, stderr %q; want 1 and %q", code, stderr.String(), want)
	}
}

// target is one row of the "Delivery targets" table of docs/delivery.md.
type target struct {
	threshold float64
	forDur    string
}

// deliveryTargets parses the "Delivery targets" table: | `Alert` | target
// | `threshold` | `for` | … |.
func deliveryTargets(t *testing.T) map[string]target {
	t.Helper()
	raw, err := os.ReadFile(deliveryDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, "\n## Delivery targets\n")
	if i < 0 {
		t.Fatalf("%s has no \"## Delivery targets\" section", deliveryDoc)
	}
	section := doc[i+1:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+3]
	}
	out := map[string]target{}
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 6 {
			t.Fatalf("delivery target row with too few cells: %q", line)
		}
		unquote := func(s string) string { return strings.Trim(strings.TrimSpace(s), "`") }
		name := unquote(cells[1])
		th, err := strconv.ParseFloat(unquote(cells[3]), 64)
		if err != nil {
			t.Fatalf("delivery target %s: threshold %q is not a number", name, cells[3])
		}
		out[name] = target{threshold: th, forDur: unquote(cells[4])}
	}
	if len(out) == 0 {
		t.Fatalf("no target rows found in the Delivery targets table of %s", deliveryDoc)
	}
	return out
}

// rule is the part of an alerting rule the test checks.
type rule struct {
	expr, forDur, severity, runbook string
}

// alertingRules reads docs/alerts/herald-outbox.rules.yml (alertingRulesIn).
func alertingRules(t *testing.T) map[string]rule {
	t.Helper()
	return alertingRulesIn(t, alertRules)
}

// alertingRulesIn reads a rules file line by line: the files are kept
// simple enough (one-line expr, one alert per "- alert:" item) to need no
// YAML parser.
func alertingRulesIn(t *testing.T, alertRules string) map[string]rule {
	t.Helper()
	raw, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]rule{}
	var name string
	for n, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || trimmed == "" {
			continue
		}
		if strings.Contains(line, "\t") {
			t.Fatalf("%s:%d: tab in YAML", alertRules, n+1)
		}
		key, value, ok := strings.Cut(strings.TrimPrefix(trimmed, "- "), ":")
		if !ok {
			continue
		}
		value = strings.Trim(strings.TrimSpace(value), `"`)
		if key == "alert" {
			name = value
			if _, dup := out[name]; dup {
				t.Fatalf("%s: alert %s defined twice", alertRules, name)
			}
			out[name] = rule{}
			continue
		}
		if name == "" {
			continue
		}
		r := out[name]
		switch key {
		case "expr":
			r.expr = value
		case "for":
			r.forDur = value
		case "severity":
			r.severity = value
		case "runbook_url":
			r.runbook = value
		}
		out[name] = r
	}
	return out
}

var thresholdRE = regexp.MustCompile(`(?:>|<|==|!=|>=|<=)\s*([0-9]+(?:\.[0-9]+)?)\s*$`)

// TestAlertRulesMatchTargets keeps docs/alerts/herald-outbox.rules.yml and
// the "Delivery targets" of docs/delivery.md the same: one rule per target,
// the threshold of its expression and its `for` equal to the documented
// values, a severity, a runbook that exists, metrics that are documented.
func TestAlertRulesMatchTargets(t *testing.T) {
	targets := deliveryTargets(t)
	rules := alertingRules(t)
	var tNames, rNames []string
	for n := range targets {
		tNames = append(tNames, n)
	}
	for n := range rules {
		rNames = append(rNames, n)
	}
	slices.Sort(tNames)
	slices.Sort(rNames)
	if !slices.Equal(tNames, rNames) {
		t.Fatalf("documented targets %v, alert rules %v: want the same alerts", tNames, rNames)
	}
	metrics, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range rules {
		want := targets[name]
		m := thresholdRE.FindStringSubmatch(r.expr)
		if m == nil {
			t.Errorf("%s: expr %q does not end in a comparison with a number", name, r.expr)
			continue
		}
		if got, _ := strconv.ParseFloat(m[1], 64); got != want.threshold {
			t.Errorf("%s: rule threshold %v, documented target %v", name, got, want.threshold)
		}
		if r.forDur != want.forDur {
			t.Errorf("%s: rule for %q, documented %q", name, r.forDur, want.forDur)
		}
		if r.severity == "" {
			t.Errorf("%s: no severity label", name)
		}
		const prefix = "https://github.com/heraldgw/herald/blob/main/"
		if !strings.HasPrefix(r.runbook, prefix+"docs/runbooks/") {
			t.Errorf("%s: runbook_url %q is not a docs/runbooks page", name, r.runbook)
		} else if _, err := os.Stat(filepath.Join("../..", strings.TrimPrefix(r.runbook, prefix))); err != nil {
			t.Errorf("%s: runbook: %v", name, err)
		}
		for _, metric := range regexp.MustCompile(`herald_[a-z_]+`).FindAllString(r.expr, -1) {
			metric = strings.TrimSuffix(metric, "_bucket") // a histogram's series
			if !strings.Contains(string(metrics), "`"+metric+"`") {
				t.Errorf("%s: metric %s is not documented in %s", name, metric, metricsDoc)
			}
		}
	}
}

// TestMetricsDocComplete keeps docs/metrics.md true: every metric name a
// Go source file registers is documented, and every documented name exists.
func TestMetricsDocComplete(t *testing.T) {
	// A metric is registered where its options name it, or through
	// internal/promreg's constructors (promreg.Counter, CounterVec, Gauge,
	// GaugeFunc, Histogram), which take the name first.
	nameRE := regexp.MustCompile(`(?:Name:\s+|\bpromreg\.(?:Counter|CounterVec|Gauge|GaugeFunc|Histogram)\()"(herald_[a-z0-9_]+)"`)
	inCode := map[string]bool{}
	for _, pkg := range []string{"outboxfeed", "outboxfeed/webhookhandler", "fanout", "fanout/redisbroker", "gateway", "auth", "subscriptions"} {
		files, err := filepath.Glob(filepath.Join("../..", pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range nameRE.FindAllStringSubmatch(string(src), -1) {
				inCode[m[1]] = true
			}
		}
	}
	raw, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	inDoc := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(herald_[a-z0-9_]+)`").FindAllStringSubmatch(string(raw), -1) {
		inDoc[m[1]] = true
	}
	for n := range inCode {
		if !inDoc[n] {
			t.Errorf("metric %s is registered in code but has no row in %s", n, metricsDoc)
		}
	}
	for n := range inDoc {
		if !inCode[n] {
			t.Errorf("%s documents %s, which no package registers", metricsDoc, n)
		}
	}
}
