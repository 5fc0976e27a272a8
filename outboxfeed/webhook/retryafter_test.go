package webhook

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"120", 120 * time.Second, true},
		{" 7 ", 7 * time.Second, true},
		{"0007", 7 * time.Second, true},
		{"99999999999999999999999", 100 * 365 * 24 * time.Hour, true},
		{"Sat, 01 Mar 2025 10:01:30 GMT", 90 * time.Second, true},
		{"Saturday, 01-Mar-25 10:01:30 GMT", 90 * time.Second, true},
		{"Sat Mar  1 10:01:30 2025", 90 * time.Second, true},
		{"Sat, 01 Mar 2025 09:00:00 GMT", 0, true},
		{"", 0, false},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"12s", 0, false},
		{"+3", 0, false},
		{"tomorrow", 0, false},
		{"Sat, 01 Mar 2025 10:01:30", 0, false},
	} {
		got, ok := ParseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, s := range []string{"0", "120", "99999999999999999999", "Sat, 01 Mar 2025 10:01:30 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994", "", " ", "-1", "1e3", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseRetryAfter(s, now)
		if d < 0 || d > 100*365*24*time.Hour || (!ok && d != 0) {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v", s, d, ok)
		}
		// delta-seconds round-trip.
		if n, err := strconv.ParseUint(s, 10, 31); err == nil {
			if d != time.Duration(n)*time.Second || !ok {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v", s, d, ok)
			}
		}
		// An HTTP date is a delay from now.
		if ts, err := http.ParseTime(s); err == nil && ts.After(now) && ts.Sub(now) < time.Hour {
			if d != ts.Sub(now) || !ok {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v", s, d, ok, ts.Sub(now))
			}
		}
	})
}
