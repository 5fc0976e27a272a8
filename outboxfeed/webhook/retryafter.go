package webhook

import (
	"net/http"
	"strings"
	"time"
)

// maxRetryAfterSeconds caps the delta-seconds form before it is turned
// into a Duration (larger values are as good as "very long").
const maxRetryAfterSeconds = 100 * 365 * 24 * 3600

// ParseRetryAfter reads a Retry-After header value (RFC 9110 §10.2.3):
// either delta-seconds (a non-negative decimal integer) or an HTTP-date
// (IMF-fixdate, or the obsolete RFC 850 and asctime forms), which is
// turned into a delay from now. It reports false for an empty or
// malformed value. A date in the past is a delay of 0; a delay longer than
// a hundred years is that long. Callers clamp the result (Config's
// RetryAfterMax).
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		var secs int64
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			if secs < maxRetryAfterSeconds {
				secs = secs*10 + int64(c-'0')
			}
		}
		return time.Duration(min(secs, maxRetryAfterSeconds)) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		return 0, true
	}
	return min(d, time.Duration(maxRetryAfterSeconds)*time.Second), true
}
