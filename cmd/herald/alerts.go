package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/heraldgw/herald/internal/durations"
	"github.com/heraldgw/herald/outboxfeed"
)

// runbookBase is where the alerts' runbook_url point.
const runbookBase = "https://github.com/heraldgw/herald/blob/main/docs/runbooks/"

// The bounds of the handler alerts that are not delivery targets of a
// handler: the same for every handler (docs/alerts/README.md).
const (
	// alertSuccessRatio: the share of claimed records a handler must
	// complete, over alertSuccessWindow, sustained for as long.
	alertSuccessRatio  = 0.99
	alertSuccessWindow = 10 * time.Minute
	// alertTargetDownFor: how long a handler's target fails every
	// delivery before OutboxTargetDown fires.
	alertTargetDownFor = 5 * time.Minute
	// alertP99Window: the rate window of the p99, and its `for`.
	alertP99Window = 5 * time.Minute
	// alertBacklogFor: how long the oldest record stays past
	// max_backlog_age before OutboxBacklogStale fires (the age gauge is
	// refreshed every 10 s).
	alertBacklogFor = 2 * time.Minute
)

// runAlerts writes the Prometheus rule file of the configured handlers.
func runAlerts(_ context.Context, args []string, stdout, stderr io.Writer) error {
	st := newCommandSettings("alerts", stderr)
	var (
		handlers handlersValue
		out      string
	)
	handlers.register(st)
	st.invocation(func() {
		st.String(&out, "out", "", "write the rule file here (default: standard output)")
	})
	st.fs.Usage = func() {
		fmt.Fprintln(st.fs.Output(), "Usage: herald alerts [--config FILE] [--out FILE]")
		fmt.Fprintln(st.fs.Output(), "\nWrites the Prometheus alert rules of the outbox: one group per handler (realtime and each configured one) from its delivery targets, and the store's. See docs/alerts/README.md.")
		st.fs.PrintDefaults()
	}
	if err := st.parseCommand(args); err != nil {
		return err
	}
	b := alertRulesFile(handlers.entries)
	if out == "" {
		_, err := stdout.Write(b)
		return err
	}
	return os.WriteFile(out, b, 0o644)
}

// alertHandlers is realtime (with its own entry's targets, or the
// defaults) followed by the configured handlers in config order.
func alertHandlers(entries []handlerEntry) []handlerEntry {
	rt := handlerEntry{Name: outboxfeed.RealtimeHandler, Type: "realtime", TargetP99: defaultTargetP99,
		MaxDeadLetters: defaultMaxDeadLetters, MaxBacklogAge: realtimeMaxBacklogAge}
	var rest []handlerEntry
	for _, e := range entries {
		if e.Type == "realtime" {
			rt = e
			continue
		}
		rest = append(rest, e)
	}
	return append([]handlerEntry{rt}, rest...)
}

// alertRule is one alerting rule as the file writes it.
type alertRule struct {
	alert, expr string
	forDur      time.Duration
	severity    string
	handler     string // the handler label; "" for a store alert
	summary     string
	description string
	runbook     string // a file of docs/runbooks
}

// alertRulesFile renders the rule file.
func alertRulesFile(entries []handlerEntry) []byte {
	var b bytes.Buffer
	b.WriteString(`# Prometheus alert rules for the Herald outbox, written by ` + "`herald alerts`" + `
# from the handlers setting: one group per handler with the alerts of its
# delivery targets (target_p99, max_dead_letters, max_backlog_age), and the
# store's. Do not edit: change the targets in the config and run
#   herald alerts --config FILE --out herald-outbox.rules.yml
# (docs/alerts/README.md).
#
# Load with: rule_files: [herald-outbox.rules.yml]   (check: promtool check rules)
groups:
`)
	writeGroup(&b, "herald-outbox", storeRules())
	for _, h := range alertHandlers(entries) {
		writeGroup(&b, "herald-outbox-handler-"+h.Name, handlerRules(h))
	}
	return append(bytes.TrimRight(b.Bytes(), "\n"), '\n')
}

// storeRules are the alerts of the outbox as a whole.
func storeRules() []alertRule {
	return []alertRule{{
		alert: "OutboxStoreDown", expr: "min by (instance) (herald_outbox_store_up) == 0", forDur: time.Minute, severity: "page",
		summary:     "The outbox store does not answer Herald Worker {{ $labels.instance }}",
		description: "Dispatch is paused and /readyz answers 503 until the store is back.",
		runbook:     "store-outage.md",
	}, {
		alert: "OutboxBrokerDown", expr: "min by (instance) (herald_outbox_broker_up) == 0", forDur: time.Minute, severity: "page",
		summary:     "The broker takes no publications from Herald Worker {{ $labels.instance }}",
		description: "The Worker met a broker outage: it claims nothing and its records wait, burning no attempts, until the broker answers again.",
		runbook:     "stalled-backlog.md",
	}, {
		alert: "OutboxLeaseLostSpike", expr: `sum(increase(herald_outbox_outcomes_total{result="lease_lost"}[10m])) > 10`, severity: "ticket",
		summary:     "More than 10 outbox lease losses in 10 minutes",
		description: "Workers outlive their lease (pauses, slow broker or store); each loss may publish a duplicate with the same id.",
		runbook:     "stalled-backlog.md",
	}}
}

// handlerRules are the alerts of one handler's delivery targets (parse
// checked them: target_p99 within the dispatch histogram's buckets).
func handlerRules(h handlerEntry) []alertRule {
	sel := fmt.Sprintf(`{handler=%q}`, h.Name)
	// The runbooks: realtime's backlog and dead letters, a webhook's endpoint.
	late, dead, target := "stalled-backlog.md", "dead-letter-replay.md", "stalled-backlog.md"
	what := "the broker"
	if h.Type == "webhook" {
		late, target = "webhook-endpoint.md", "webhook-endpoint.md"
		what = "its webhook endpoint"
	}
	rules := []alertRule{{
		alert: "OutboxDeliverySlow", severity: "page", forDur: alertP99Window, runbook: late,
		expr: fmt.Sprintf(`histogram_quantile(0.99, sum by (le) (rate(herald_outbox_dispatch_duration_seconds_bucket%s[%s]))) > %s`,
			sel, promDuration(alertP99Window), seconds(h.TargetP99)),
		summary: fmt.Sprintf("Handler %s: p99 from claim to completion over its %s target (target_p99)", h.Name, promDuration(h.TargetP99)),
		description: fmt.Sprintf("The p99 of handler %s's deliveries to %s over %s is {{ $value | humanizeDuration }}.",
			h.Name, what, promDuration(alertP99Window)),
	}, {
		alert: "OutboxBacklogStale", severity: "page", forDur: alertBacklogFor, runbook: late,
		expr:    fmt.Sprintf(`max(herald_outbox_oldest_pending_age_seconds%s) > %s`, sel, seconds(h.MaxBacklogAge)),
		summary: fmt.Sprintf("Handler %s: records wait longer than %s (max_backlog_age)", h.Name, promDuration(h.MaxBacklogAge)),
		description: fmt.Sprintf("The oldest record handler %s has not delivered is {{ $value | humanizeDuration }} old.",
			h.Name),
	}, {
		alert: "OutboxDeadLetters", severity: "ticket", runbook: dead,
		expr:    fmt.Sprintf(`max(herald_outbox_dead_letter%s) > %d`, sel, h.MaxDeadLetters),
		summary: fmt.Sprintf("Handler %s: more than %d dead letters (max_dead_letters)", h.Name, h.MaxDeadLetters),
		description: fmt.Sprintf("Handler %s has {{ $value | humanize }} dead letters; read their last_error with `herald outbox list --handler %s --state dead_letter`.",
			h.Name, h.Name),
	}, {
		alert: "OutboxSuccessRateLow", severity: "page", forDur: alertSuccessWindow, runbook: dead,
		expr: fmt.Sprintf(`sum(rate(herald_outbox_outcomes_total{handler=%q,result="success"}[%s])) / sum(rate(herald_outbox_outcomes_total{handler=%q,result=~"success|retry|dead_letter"}[%s])) < %s`,
			h.Name, promDuration(alertSuccessWindow), h.Name, promDuration(alertSuccessWindow), strconv.FormatFloat(alertSuccessRatio, 'f', -1, 64)),
		summary: fmt.Sprintf("Handler %s: less than %s%% of claimed records delivered", h.Name, strconv.FormatFloat(alertSuccessRatio*100, 'f', -1, 64)),
		description: fmt.Sprintf("Handler %s's success rate over %s is {{ $value | humanizePercentage }}.",
			h.Name, promDuration(alertSuccessWindow)),
	}, {
		alert: "OutboxTargetDown", severity: "page", forDur: alertTargetDownFor, runbook: target,
		expr:    fmt.Sprintf(`max(herald_outbox_target_up%s) == 0`, sel),
		summary: fmt.Sprintf("Handler %s: every delivery to %s fails", h.Name, what),
		description: fmt.Sprintf("No Worker has delivered to handler %s's target for %s; its records wait (none is dead-lettered by an outage). `herald handlers list` shows FAILING_SINCE and the last error.",
			h.Name, promDuration(alertTargetDownFor)),
	}}
	if h.Type == "webhook" {
		rules = append(rules, alertRule{
			alert: "OutboxHandlerDisabled", severity: "page", runbook: "webhook-endpoint.md",
			expr:    fmt.Sprintf(`max(herald_outbox_handler_disabled%s) == 1`, sel),
			summary: fmt.Sprintf("Handler %s is disabled", h.Name),
			description: fmt.Sprintf("Its endpoint answered 410 Gone or failed past disable_after; its records wait for `herald handlers enable %s`.",
				h.Name),
		})
	}
	for i := range rules {
		rules[i].handler = h.Name
	}
	return rules
}

// writeGroup writes one rule group. Every expr stays on one line.
func writeGroup(b *bytes.Buffer, name string, rules []alertRule) {
	fmt.Fprintf(b, "  - name: %s\n    rules:\n", name)
	for i, r := range rules {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(b, "      - alert: %s\n        expr: %s\n        for: %s\n        labels:\n          severity: %s\n",
			r.alert, r.expr, promDuration(r.forDur), r.severity)
		if r.handler != "" {
			fmt.Fprintf(b, "          handler: %s\n", r.handler)
		}
		fmt.Fprintf(b, "        annotations:\n          summary: %s\n          description: %s\n          runbook_url: %s\n",
			yamlString(r.summary), yamlString(r.description), runbookBase+r.runbook)
	}
	b.WriteString("\n")
}

// yamlString quotes s: a JSON string is a YAML double-quoted scalar.
func yamlString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// seconds writes d as a number of seconds.
func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// promDuration writes d as Prometheus writes durations: 15m, 1h30m, 500ms,
// 0m for none.
func promDuration(d time.Duration) string {
	if d == 0 {
		return "0m"
	}
	return durations.Short(d)
}
