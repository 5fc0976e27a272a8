package testenv

import "time"

// OpsStatus is the body of GET /ops/status (docs/operator.md) as a
// client decodes it. It is written apart from the server's own types so
// that a test decoding into it checks the names on the wire.
type OpsStatus struct {
	Time      time.Time `json:"time"`
	Readiness struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	} `json:"readiness"`
	Connections struct {
		SSE   int `json:"sse"`
		WS    int `json:"ws"`
		Total int `json:"total"`
		Max   int `json:"max"`
	} `json:"connections"`
	Outbox struct {
		Status        string     `json:"status"`
		Pending       *int64     `json:"pending"`
		DeadLetters   *int64     `json:"dead_letters"`
		OldestPending *time.Time `json:"oldest_pending"`
		OldestAge     *float64   `json:"oldest_pending_age_seconds"`
		Handlers      []struct {
			Name        string `json:"name"`
			Type        string `json:"type"`
			State       string `json:"state"`
			Pending     int64  `json:"pending"`
			DeadLetters int64  `json:"dead_letters"`
			TargetUp    bool   `json:"target_up"`
		} `json:"handlers"`
	} `json:"outbox"`
}
