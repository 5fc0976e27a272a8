package stage_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
)

// TestConsumerLinksOnlyStaging builds an application module that imports
// only this package (with a replace directive onto this work tree) and
// checks what it links and which go line it is left with.
func TestConsumerLinksOnlyStaging(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	testenv.Must(t, err, "find the go command")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	testenv.Must(t, err, "module root")
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	testenv.Must(t, err, "read go.sum")

	const appGo = "1.26.0" // the oldest go line this module allows (see go.mod)
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/app\n\ngo " + appGo + "\n\n" +
			"require github.com/heraldgw/herald v0.0.0-00010101000000-000000000000\n\n" +
			"replace github.com/heraldgw/herald => " + root + "\n",
		// Herald's go.sum holds every hash the app needs, so the go
		// command has nothing to look up.
		"go.sum": string(sum),
		"main.go": `package main

import (
	"fmt"

	"github.com/heraldgw/herald/outboxfeed/stage"
)

func main() { fmt.Println(stage.Stage != nil, stage.StageSQL != nil) }
`,
	}
	for name, body := range files {
		testenv.Must(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644), "write "+name)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}

	all := strings.Fields(run("list", "-deps", "."))
	nonStd := strings.Fields(run("list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "."))
	t.Logf("the app links %d packages, %d outside the standard library:\n%s", len(all), len(nonStd), strings.Join(nonStd, "\n"))
	for _, p := range nonStd {
		for _, banned := range []string{"modernc.org/sqlite", "modernc.org/libc", "github.com/redis/go-redis", "github.com/prometheus/",
			"github.com/heraldgw/herald/fanout", "github.com/heraldgw/herald/gateway", "github.com/heraldgw/herald/auth",
			"github.com/heraldgw/herald/subscriptions"} {
			if strings.HasPrefix(p, banned) || p == "github.com/heraldgw/herald/outboxfeed" {
				t.Errorf("the app links %s", p)
			}
		}
	}
	if !contains(nonStd, "github.com/jackc/pgx/v5") || !contains(nonStd, "github.com/heraldgw/herald/outboxfeed/stage") {
		t.Errorf("the app does not link pgx and stage: %v", nonStd)
	}

	run("build", "-o", filepath.Join(dir, "app"), ".")
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	testenv.Must(t, err, "read the app's go.mod")
	if !strings.Contains(string(mod), "\ngo "+appGo+"\n") {
		t.Errorf("importing stage raised the app's go line:\n%s", mod)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
