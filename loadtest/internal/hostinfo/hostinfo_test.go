package hostinfo

import (
	"regexp"
	"runtime"
	"strings"
	"testing"
)

func TestReadsThisMachine(t *testing.T) {
	if !regexp.MustCompile(`^\d+\.\d+ / \d+\.\d+ / \d+\.\d+$`).MatchString(LoadAvg()) {
		t.Fatalf("LoadAvg() = %q", LoadAvg())
	}
	if !regexp.MustCompile(`^\d+ GiB$`).MatchString(MemTotal()) {
		t.Fatalf("MemTotal() = %q", MemTotal())
	}
	if m := Machine(); !strings.Contains(m, runtime.Version()) || strings.Contains(m, "unknown") {
		t.Fatalf("Machine() = %q", m)
	}
}
