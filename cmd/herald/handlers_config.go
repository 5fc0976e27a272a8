package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/webhook"
)

// handlerEntry is one entry of the handlers setting (docs/handlers.md).
type handlerEntry struct {
	Name   string
	Type   string // "webhook" or "realtime"
	Start  outboxfeed.StartFrom
	Routes outboxfeed.Routes
	// Webhook is the endpoint (type webhook).
	Webhook webhook.Config
	// Delivery targets, from which `herald alerts` writes the rules.
	TargetP99      time.Duration
	MaxDeadLetters int
	MaxBacklogAge  time.Duration
}

// handlerJSON is an entry as written; durations are strings.
type handlerJSON struct {
	Name                string             `json:"name"`
	Type                string             `json:"type"`
	Start               string             `json:"start"`
	Routes              []outboxfeed.Route `json:"routes"`
	URL                 string             `json:"url"`
	Secret              string             `json:"secret"`
	Secrets             []string           `json:"secrets"`
	SecretFile          string             `json:"secret_file"`
	Timeout             string             `json:"timeout"`
	MaxInFlight         int                `json:"max_in_flight"`
	ClaimDelay          string             `json:"claim_delay"`
	BatchSize           int                `json:"batch_size"`
	MaxAttempts         int                `json:"max_attempts"`
	MaxAge              string             `json:"max_age"`
	RetryBaseDelay      string             `json:"retry_base_delay"`
	RetryMaxDelay       string             `json:"retry_max_delay"`
	OutageBaseDelay     string             `json:"outage_base_delay"`
	OutageMaxDelay      string             `json:"outage_max_delay"`
	RetryAfterMax       string             `json:"retry_after_max"`
	DisableAfter        string             `json:"disable_after"`
	AllowPrivateNetwork bool               `json:"allow_private_network"`
	CAFile              string             `json:"ca_file"`
	TargetP99           string             `json:"target_p99"`
	MaxDeadLetters      *int               `json:"max_dead_letters"`
	MaxBacklogAge       string             `json:"max_backlog_age"`
}

// webhookOnlyKeys are the keys a realtime entry may not have.
var webhookOnlyKeys = []string{"url", "secret", "secrets", "secret_file", "timeout", "max_in_flight", "claim_delay", "max_attempts", "max_age",
	"retry_base_delay", "retry_max_delay", "outage_base_delay", "outage_max_delay", "retry_after_max", "disable_after",
	"allow_private_network", "ca_file", "start"}

// Default delivery targets of a handler.
const (
	defaultTargetP99      = 5 * time.Second
	defaultMaxDeadLetters = 0
	defaultMaxBacklogAge  = 15 * time.Minute
	// realtimeMaxBacklogAge is the realtime handler's: its delivery
	// target is a p99 of 5 s (docs/delivery.md).
	realtimeMaxBacklogAge = 5 * time.Second
	// maxTargetP99 is the largest finite bucket of
	// herald_outbox_dispatch_duration_seconds: a p99 beyond it cannot be
	// measured, so no alert could fire.
	maxTargetP99 = 10 * time.Second
)

// handlersValue is the handlers setting: a JSON list of handler entries
// (a YAML list in a YAML config file). Setting it only keeps the text:
// check parses it, so an error never echoes the value (which holds
// secrets), as the flag package and the environment's would.
type handlersValue struct {
	raw     json.RawMessage
	entries []handlerEntry
}

func (v *handlersValue) String() string {
	if v == nil || v.raw == nil {
		return ""
	}
	var probe any
	if json.Unmarshal(v.raw, &probe) != nil {
		return string(v.raw)
	}
	canon, _ := json.Marshal(probe) // keys sorted: the same list prints the same
	if string(canon) == "[]" || string(canon) == "null" || string(canon) == `""` {
		return ""
	}
	return string(canon)
}

// Set takes the list as JSON (the flag and the environment variable).
func (v *handlersValue) Set(s string) error { return v.SetJSON(json.RawMessage(s)) }

// SetJSON takes the list from a config file.
func (v *handlersValue) SetJSON(raw json.RawMessage) error {
	v.raw, v.entries = append(json.RawMessage(nil), raw...), nil
	return nil
}

// check parses the list (from names where it came from). An empty
// string, null and [] are no handler besides realtime.
func (v *handlersValue) check(from origin) error {
	if len(bytes.TrimSpace(v.raw)) == 0 {
		return nil
	}
	var probe any
	if err := json.Unmarshal(v.raw, &probe); err != nil {
		return fmt.Errorf("config: %s: want a JSON list of handlers: %v", from.named("handlers"), err)
	}
	if probe == nil || probe == "" {
		return nil
	}
	entries, err := parseHandlers(v.raw)
	if err != nil {
		return fmt.Errorf("config: %s: %w", from.named("handlers"), err)
	}
	v.entries = entries
	return nil
}

// register adds the handlers setting to st (serve, feed and alerts read
// it); parse checks it.
func (v *handlersValue) register(st *settings) {
	st.add("handlers", "the handlers besides realtime, as a JSON list (a YAML list in a YAML config file); see docs/handlers.md", v)
	st.checks = append(st.checks, func() error { return v.check(st.source("handlers")) })
}

// jsonValue is the list as a config file holds it.
func (v *handlersValue) jsonValue() any {
	var list []any
	if v.raw != nil {
		_ = json.Unmarshal(v.raw, &list)
	}
	if list == nil {
		list = []any{}
	}
	return list
}

// parseHandlers checks every entry: unknown keys, types, names,
// durations, routes; a webhook's url and secrets are checked by
// webhook.New when the handler starts (its errors name the key too).
func parseHandlers(raw json.RawMessage) ([]handlerEntry, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("want a JSON list of handlers: %v", err)
	}
	seen := map[string]bool{}
	out := make([]handlerEntry, 0, len(items))
	for i, item := range items {
		e, err := parseHandler(item)
		if err != nil {
			name := ""
			var probe struct{ Name string }
			if json.Unmarshal(item, &probe) == nil && probe.Name != "" {
				name = fmt.Sprintf(" (%s)", probe.Name)
			}
			return nil, fmt.Errorf("handlers[%d]%s: %w", i, name, err)
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("handlers[%d] (%s): name: a second handler of that name", i, e.Name)
		}
		seen[e.Name] = true
		out = append(out, e)
	}
	return out, nil
}

func parseHandler(raw json.RawMessage) (handlerEntry, error) {
	var j handlerJSON
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		if k, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return handlerEntry{}, fmt.Errorf("unknown key %s", k)
		}
		return handlerEntry{}, fmt.Errorf("not a handler object: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return handlerEntry{}, errors.New("not a single handler object")
	}
	e := handlerEntry{Name: j.Name, Type: j.Type, TargetP99: defaultTargetP99, MaxDeadLetters: defaultMaxDeadLetters,
		MaxBacklogAge: defaultMaxBacklogAge}
	if j.Type == "realtime" {
		e.MaxBacklogAge = realtimeMaxBacklogAge
	}
	if err := outboxfeed.ValidateHandlerName(j.Name); err != nil {
		return e, fmt.Errorf("name: %v", err)
	}
	routes, err := outboxfeed.CompileRoutes(j.Routes)
	if err != nil {
		return e, errors.New(strings.TrimPrefix(err.Error(), outboxfeed.ErrInvalidRoute.Error()+": "))
	}
	e.Routes = routes
	durs := []struct {
		key string
		src string
		dst *time.Duration
	}{
		{"target_p99", j.TargetP99, &e.TargetP99}, {"max_backlog_age", j.MaxBacklogAge, &e.MaxBacklogAge},
		{"timeout", j.Timeout, &e.Webhook.Timeout}, {"claim_delay", j.ClaimDelay, &e.Webhook.ClaimDelay}, {"max_age", j.MaxAge, &e.Webhook.MaxAge},
		{"retry_base_delay", j.RetryBaseDelay, &e.Webhook.RetryBaseDelay}, {"retry_max_delay", j.RetryMaxDelay, &e.Webhook.RetryMaxDelay},
		{"outage_base_delay", j.OutageBaseDelay, &e.Webhook.OutageBaseDelay}, {"outage_max_delay", j.OutageMaxDelay, &e.Webhook.OutageMaxDelay},
		{"retry_after_max", j.RetryAfterMax, &e.Webhook.RetryAfterMax}, {"disable_after", j.DisableAfter, &e.Webhook.DisableAfter},
	}
	for _, d := range durs {
		if d.src == "" {
			continue
		}
		v, err := time.ParseDuration(d.src)
		if err != nil || v < 0 {
			return e, fmt.Errorf("%s: %q is not a duration such as 15s or 72h", d.key, d.src)
		}
		*d.dst = v
	}
	switch {
	case e.TargetP99 <= 0 || e.TargetP99 > maxTargetP99:
		return e, fmt.Errorf("target_p99: %s: want more than 0 and at most %s (the largest bucket of herald_outbox_dispatch_duration_seconds)",
			j.TargetP99, maxTargetP99)
	case e.MaxBacklogAge <= 0:
		return e, fmt.Errorf("max_backlog_age: %s: want more than 0", j.MaxBacklogAge)
	}
	if j.MaxDeadLetters != nil {
		if *j.MaxDeadLetters < 0 {
			return e, fmt.Errorf("max_dead_letters: %d: must be ≥ 0", *j.MaxDeadLetters)
		}
		e.MaxDeadLetters = *j.MaxDeadLetters
	}
	switch j.Type {
	case "realtime":
		if j.Name != outboxfeed.RealtimeHandler {
			return e, fmt.Errorf("type: only the built-in handler %q is of type realtime", outboxfeed.RealtimeHandler)
		}
		var keys map[string]json.RawMessage
		_ = json.Unmarshal(raw, &keys)
		if _, ok := keys["batch_size"]; ok {
			return e, errors.New("batch_size: not a setting of the realtime handler; its batch is --outbox-batch-size")
		}
		for _, k := range webhookOnlyKeys {
			if _, ok := keys[k]; ok {
				return e, fmt.Errorf("%s: not a setting of the realtime handler", k)
			}
		}
		return e, nil
	case "webhook":
	case "":
		return e, errors.New("type: missing; want webhook or realtime")
	default:
		return e, fmt.Errorf("type: %q: want webhook or realtime", j.Type)
	}
	if j.Name == outboxfeed.RealtimeHandler {
		return e, fmt.Errorf("name: %q is the built-in realtime handler", j.Name)
	}
	switch j.Start {
	case "", string(outboxfeed.StartRetained):
		e.Start = outboxfeed.StartRetained
	case string(outboxfeed.StartNew):
		e.Start = outboxfeed.StartNew
	default:
		return e, fmt.Errorf("start: %q: want retained or new", j.Start)
	}
	w := &e.Webhook
	w.Name, w.URL, w.SecretFile, w.CAFile = j.Name, j.URL, j.SecretFile, j.CAFile
	w.Secret = webhook.Secret(j.Secret)
	for _, s := range j.Secrets {
		w.Secrets = append(w.Secrets, webhook.Secret(s))
	}
	w.MaxInFlight, w.MaxAttempts, w.AllowPrivateNetwork = j.MaxInFlight, j.MaxAttempts, j.AllowPrivateNetwork
	w.BatchSize = j.BatchSize
	if j.URL == "" {
		return e, errors.New("url: missing")
	}
	// Every other setting, the secrets (and their file) included, is
	// checked now, so a wrong one stops the process before it starts.
	ep, err := webhook.New(*w)
	if err != nil {
		return e, err
	}
	ep.Close()
	return e, nil
}
