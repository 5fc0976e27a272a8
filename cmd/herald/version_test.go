package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolveBuildInfo(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "-trimpath", Value: "true"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2025-01-02T03:04:05Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	cases := []struct {
		name    string
		stamped string
		bi      *debug.BuildInfo
		want    buildInfo
	}{
		{"no build info", "", nil, buildInfo{Version: "dev", GoVersion: runtime.Version()}},
		{"stamped, no build info", "v0.2.0", nil, buildInfo{Version: "v0.2.0", GoVersion: runtime.Version()}},
		{"go install @version", "", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/heraldgw/herald", Version: "v0.1.0"}},
			buildInfo{Version: "v0.1.0", GoVersion: "go1.99.1"}},
		{"stamp beats the module version", "v0.1.0-3-gabcdef0-dirty", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v0.1.0"}},
			buildInfo{Version: "v0.1.0-3-gabcdef0-dirty", GoVersion: "go1.99.1"}},
		{"(devel) is not a version", "", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"}},
			buildInfo{Version: "dev", GoVersion: "go1.99.1"}},
		{"empty module version", "", &debug.BuildInfo{Main: debug.Module{}}, buildInfo{Version: "dev", GoVersion: runtime.Version()}},
		{"vcs settings", "", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			buildInfo{Version: "dev", GoVersion: "go1.99.1", Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2025-01-02T03:04:05Z", Modified: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := resolveBuildInfo(c.stamped, c.bi); got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestVersionReport(t *testing.T) {
	var b strings.Builder
	buildInfo{Version: "v0.1.0", GoVersion: "go1.99.1", Revision: "abc", Time: "2025-01-02T03:04:05Z", Modified: true}.write(&b)
	want := "herald v0.1.0\ngo:       go1.99.1 " + runtime.GOOS + "/" + runtime.GOARCH + "\nrevision: abc (2025-01-02T03:04:05Z) with uncommitted changes\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	buildInfo{Version: "dev", GoVersion: "go1.99.1"}.write(&b)
	if strings.Contains(b.String(), "revision") {
		t.Fatalf("a revision line without a revision:\n%s", b.String())
	}
}

// TestVersionStamped builds the binary as `make build` does, with
// -ldflags "-X main.version=…", and runs `herald version`.
func TestVersionStamped(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "herald")
	const stamp = "v0.0.0-test-3-gabcdef0-dirty"
	out, err := exec.Command("go", "build", "-ldflags", "-X main.version="+stamp, "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("herald version: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if lines[0] != "herald "+stamp {
		t.Fatalf("first line %q, want %q", lines[0], "herald "+stamp)
	}
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "go:       "+runtime.Version()) {
		t.Fatalf("no Go version line:\n%s", out)
	}
	if err := exec.Command(bin, "version", "extra").Run(); err == nil {
		t.Fatal("herald version extra: exit 0, want a usage error")
	}
}
