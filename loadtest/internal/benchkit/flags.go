package benchkit

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"
)

// DatabaseURLFlag registers -database-url, the PostgreSQL server of a
// benchmark that creates and drops a database of its own there, into
// *url (whose value is the default).
func DatabaseURLFlag(fs *flag.FlagSet, url *string) {
	fs.StringVar(url, "database-url", *url, "PostgreSQL server (a database to connect to; the benchmark creates and drops its own)")
}

// FlagErrors collects what is wrong with a program's flags, one error a
// bad flag, in the order they are checked.
type FlagErrors []error

// Add adds err; nil adds nothing.
func (e *FlagErrors) Add(err error) {
	if err != nil {
		*e = append(*e, err)
	}
}

// Badf adds an error formatted as fmt.Errorf formats it.
func (e *FlagErrors) Badf(format string, args ...any) { *e = append(*e, fmt.Errorf(format, args...)) }

// AtLeast adds "<flag> <v>: must be ≥ <lo>" when v < lo.
func (e *FlagErrors) AtLeast(flag string, v, lo int) {
	if v < lo {
		e.Badf("%s %d: must be ≥ %s", flag, v, groupDigits(lo))
	}
}

// Within adds "<flag> <v>: must be <lo>–<hi>" when v is outside lo..hi.
func (e *FlagErrors) Within(flag string, v, lo, hi int) {
	if v < lo || v > hi {
		e.Badf("%s %d: must be %s–%s", flag, v, groupDigits(lo), groupDigits(hi))
	}
}

// AtLeastDuration adds "<flag> <d>: must be ≥ <lo>" when d < lo.
func (e *FlagErrors) AtLeastDuration(flag string, d, lo time.Duration) {
	if d < lo {
		e.Badf("%s %v: must be ≥ %v", flag, d, lo)
	}
}

// Err is the errors joined, one a line; nil when there are none.
func (e FlagErrors) Err() error { return errors.Join(e...) }

// groupDigits writes n with commas between groups of three digits from
// 10,000 up (1024 stays as it is).
func groupDigits(n int) string {
	s := strconv.Itoa(n)
	if n < 10_000 {
		return s
	}
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// CheckPaced checks the flags of a paced latency phase: -rate (records/s,
// 1–1,000,000), -latency-duration (≥ 1s) and -latency-producers (≥ 1).
// It returns one error per bad flag, joined; nil when all are good.
func CheckPaced(rate int, duration time.Duration, producers int) error {
	var bad FlagErrors
	bad.Within("-rate", rate, 1, 1_000_000)
	bad.AtLeastDuration("-latency-duration", duration, time.Second)
	bad.AtLeast("-latency-producers", producers, 1)
	return bad.Err()
}

// CheckUnpaced checks the flags of an unpaced producer phase: -producers
// (≥ 1) and -producer-duration (≥ 1s), as CheckPaced does.
func CheckUnpaced(producers int, duration time.Duration) error {
	var bad FlagErrors
	bad.AtLeast("-producers", producers, 1)
	bad.AtLeastDuration("-producer-duration", duration, time.Second)
	return bad.Err()
}
