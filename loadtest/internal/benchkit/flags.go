package benchkit

import (
	"errors"
	"fmt"
	"time"
)

// CheckPaced checks the flags of a paced latency phase: -rate (records/s,
// 1–1,000,000), -latency-duration (≥ 1s) and -latency-producers (≥ 1).
// It returns one error per bad flag, joined; nil when all are good.
func CheckPaced(rate int, duration time.Duration, producers int) error {
	var errs []error
	if rate < 1 || rate > 1_000_000 {
		errs = append(errs, fmt.Errorf("-rate %d: must be 1–1,000,000", rate))
	}
	if duration < time.Second {
		errs = append(errs, fmt.Errorf("-latency-duration %v: must be ≥ 1s", duration))
	}
	if producers < 1 {
		errs = append(errs, fmt.Errorf("-latency-producers %d: must be ≥ 1", producers))
	}
	return errors.Join(errs...)
}

// CheckUnpaced checks the flags of an unpaced producer phase: -producers
// (≥ 1) and -producer-duration (≥ 1s), as CheckPaced does.
func CheckUnpaced(producers int, duration time.Duration) error {
	var errs []error
	if producers < 1 {
		errs = append(errs, fmt.Errorf("-producers %d: must be ≥ 1", producers))
	}
	if duration < time.Second {
		errs = append(errs, fmt.Errorf("-producer-duration %v: must be ≥ 1s", duration))
	}
	return errors.Join(errs...)
}
