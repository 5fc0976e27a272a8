// Package benchtest holds what the load-test programs' smoke tests share:
// a tiny run of a program's run function and the checks on its report.
package benchtest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// Smoke checks a program's flags with validate, then runs it as main
// would, the report to one buffer and the progress to another; an error
// from either fails the test (with the progress, which says how far the
// run got). It returns the report and the progress.
func Smoke(t testing.TB, validate func() error, run func(ctx context.Context, out, progress io.Writer) error) (report, progress string) {
	t.Helper()
	if err := validate(); err != nil {
		t.Fatal(err)
	}
	var out, prog bytes.Buffer
	if err := run(context.Background(), &out, &prog); err != nil {
		t.Fatalf("run: %v\n%s", err, prog.String())
	}
	return out.String(), prog.String()
}

// ReportHas fails the test for each of wants that report lacks.
func ReportHas(t testing.TB, report string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}
