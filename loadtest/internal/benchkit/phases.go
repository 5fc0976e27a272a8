package benchkit

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// DefaultDatabaseURL is the local test server (trust auth): the default
// of the benchmarks' -database-url.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// HasPhase reports whether name is among the comma-separated phases
// (spaces around each are ignored).
func HasPhase(phases, name string) bool {
	for p := range strings.SplitSeq(phases, ",") {
		if strings.TrimSpace(p) == name {
			return true
		}
	}
	return false
}

// PhasesFlag registers -phases, the comma-separated phases to run among
// all (checked by CheckPhases), into *phases (whose value is the
// default).
func PhasesFlag(fs *flag.FlagSet, phases *string, all ...string) {
	fs.StringVar(phases, "phases", *phases, "comma-separated phases to run: "+strings.Join(all, ", "))
}

// CheckPhases fails for each of the comma-separated phases that is not
// one of known, as a -phases flag error naming the known ones; nil when
// all are known.
func CheckPhases(phases string, known ...string) error {
	var errs []error
	for p := range strings.SplitSeq(phases, ",") {
		if !contains(known, strings.TrimSpace(p)) {
			errs = append(errs, fmt.Errorf("-phases: unknown phase %q (want %s)", p, strings.Join(known, ", ")))
		}
	}
	return errors.Join(errs...)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
