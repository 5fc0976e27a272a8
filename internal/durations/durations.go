// Package durations writes a time.Duration the way Herald's settings,
// generated configuration and docs show it. It is a leaf, for the command
// and the tests that check the docs alike.
package durations

import (
	"strings"
	"time"
)

// Short is d as time.ParseDuration reads it, without the zero units
// time.Duration.String keeps: "24h", not "24h0m0s"; "5m", not "5m0s".
func Short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
