package main

import (
	"fmt"
	"time"
)

// rate is n per second over d (0 when d is not positive).
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// thousands formats n with thousands separators ("200,000").
func thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
