package alertstest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const alertsDir = "../../docs/alerts"

// promtool finds the promtool binary; its absence fails the test (an
// unchecked rule file is how alerts silently break), with how to install it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found in PATH (%v): the alert rules in docs/alerts cannot be checked. "+
			"Install it: `apt-get install prometheus` on Debian/Ubuntu (ships /usr/bin/promtool), "+
			"or run `make test` as root (scripts/test-services.sh installs it), "+
			"or put promtool from a Prometheus release (https://prometheus.io/download/) on PATH", err)
	}
	return p
}

// glob finds the files matching pattern in docs/alerts and in its
// examples (the rules `herald alerts` writes for example configs).
func glob(t *testing.T, pattern string) []string {
	t.Helper()
	var files []string
	for _, dir := range []string{alertsDir, filepath.Join(alertsDir, "examples")} {
		found, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			t.Fatal(err)
		}
		if len(found) == 0 {
			t.Fatalf("no %s in %s", pattern, dir)
		}
		files = append(files, found...)
	}
	return files
}

// TestCheckRules runs `promtool check rules` on every rule file.
func TestCheckRules(t *testing.T) {
	bin := promtool(t)
	for _, f := range glob(t, "*.rules.yml") {
		t.Run(strings.TrimPrefix(f, alertsDir+"/"), func(t *testing.T) {
			out, err := exec.Command(bin, "check", "rules", f).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool check rules %s: %v\n%s", f, err, out)
			}
		})
	}
}

// TestRuleUnitTests runs `promtool test rules` on every *_test.yml, and
// requires one for every rule file.
func TestRuleUnitTests(t *testing.T) {
	bin := promtool(t)
	for _, f := range glob(t, "*.rules.yml") {
		test := strings.TrimSuffix(f, ".yml") + "_test.yml"
		if _, err := os.Stat(test); err != nil {
			t.Errorf("%s has no unit tests: %v", f, err)
		}
	}
	for _, f := range glob(t, "*_test.yml") {
		t.Run(strings.TrimPrefix(f, alertsDir+"/"), func(t *testing.T) {
			// promtool resolves rule_files relative to the test file.
			cmd := exec.Command(bin, "test", "rules", filepath.Base(f))
			cmd.Dir = filepath.Dir(f)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("promtool test rules %s: %v\n%s", f, err, out)
			}
		})
	}
}
