package webhook

import "time"

// RetryGrowth is the factor by which the retry ceiling grows with each
// failed attempt.
const RetryGrowth = 4

// Schedule is when an endpoint's deliveries are tried again: pure
// functions of an endpoint's settings, the failure counts and a uniform
// random number the caller draws (rand.Float64()), so the same inputs
// always give the same delay. Config.Schedule returns it with the
// defaults applied; docs/handlers.md has the default tables.
type Schedule struct {
	// MaxAttempts is how many attempts a record gets; the failure of the
	// last one dead-letters it.
	MaxAttempts int
	// MaxAge is how long after the record's time it keeps being retried:
	// a retry that would fall later is moved to MaxAge (one last
	// attempt), and a failure at or after MaxAge dead-letters the record.
	MaxAge time.Duration
	// RetryBaseDelay and RetryMaxDelay bound the retry backoff (attempts
	// burnt): after the failed attempt n the next one waits a uniformly
	// random time in [0, min(RetryMaxDelay, RetryBaseDelay·4^(n-1))]
	// (full jitter).
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// OutageBaseDelay and OutageMaxDelay bound the backoff of an endpoint
	// outage (no attempt burnt): after the f-th outage result in a row the
	// endpoint waits between half and all of
	// min(OutageMaxDelay, OutageBaseDelay·2^(f-1)) (equal jitter).
	OutageBaseDelay time.Duration
	OutageMaxDelay  time.Duration
	// RetryAfterMax is the longest Retry-After honoured; a longer one is
	// cut to it.
	RetryAfterMax time.Duration
	// DisableAfter is how long an endpoint may fail continuously (no 2xx
	// since its first failure) before it is disabled.
	DisableAfter time.Duration
}

// RetryCeiling is the longest wait after the failed attempt n (n ≥ 1):
// min(RetryMaxDelay, RetryBaseDelay·4^(n-1)).
func (s Schedule) RetryCeiling(n int) time.Duration {
	d := s.RetryBaseDelay
	for i := 1; i < n && d < s.RetryMaxDelay; i++ {
		d *= RetryGrowth
	}
	return min(d, s.RetryMaxDelay)
}

// Retry decides what follows the failed attempt n (n ≥ 1) of a record
// whose time is age ago, for a retryable result (ClassRetryable). It
// reports false when the record is to be dead-lettered: n ≥ MaxAttempts,
// or age ≥ MaxAge. Otherwise the delay is drawn from [0, RetryCeiling(n)]
// by u (uniform in [0, 1)), raised to retryAfter (the endpoint's
// Retry-After, cut to RetryAfterMax; 0 when none) and lowered so the next
// attempt is no later than MaxAge.
func (s Schedule) Retry(n int, age, retryAfter time.Duration, u float64) (time.Duration, bool) {
	if n >= s.MaxAttempts || age >= s.MaxAge {
		return 0, false
	}
	d := jitter(s.RetryCeiling(n), u)
	if retryAfter > 0 {
		d = max(d, min(retryAfter, s.RetryAfterMax))
	}
	if age+d > s.MaxAge {
		d = s.MaxAge - age
	}
	return d, true
}

// OutageCeiling is the longest wait after the f-th outage result in a row
// (f ≥ 1) when the endpoint sent no Retry-After:
// min(OutageMaxDelay, OutageBaseDelay·2^(f-1)).
func (s Schedule) OutageCeiling(f int) time.Duration {
	d := s.OutageBaseDelay
	for i := 1; i < f && d < s.OutageMaxDelay; i++ {
		d *= 2
	}
	return min(d, s.OutageMaxDelay)
}

// Outage is how long an endpoint waits, after the f-th outage result in a
// row (ClassOutage; f ≥ 1), before its next request. No attempt is burnt.
// Without a Retry-After (retryAfter 0) it is between half and all of
// OutageCeiling(f), drawn by u (uniform in [0, 1)). With one, it is the
// Retry-After held within [OutageBaseDelay, RetryAfterMax], plus up to a
// tenth of that drawn by u, so receivers that throttle many senders alike
// do not see them return in the same second.
func (s Schedule) Outage(f int, retryAfter time.Duration, u float64) time.Duration {
	if retryAfter > 0 {
		r := min(max(retryAfter, s.OutageBaseDelay), s.RetryAfterMax)
		return r + jitter(r/10, u)
	}
	c := s.OutageCeiling(f)
	return c/2 + jitter(c-c/2, u)
}

// Disable reports whether an endpoint that has been failing continuously
// for failingFor (since the first failure after its last 2xx) is to be
// disabled: failingFor ≥ DisableAfter. What counts as failing is
// Result.Failing.
func (s Schedule) Disable(failingFor time.Duration) bool {
	return failingFor >= s.DisableAfter
}

// jitter is u·d for u clamped to [0, 1), so never more than d.
func jitter(d time.Duration, u float64) time.Duration {
	if d <= 0 || u <= 0 || u != u {
		return 0
	}
	if u >= 1 {
		return d
	}
	return time.Duration(u * float64(d))
}
