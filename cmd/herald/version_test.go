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

// TestMakeBuildPrintsTag follows the release procedure (docs/release.md)
// on a clone of this repository: an annotated tag on the commit, then
// `make build`, and `herald version` prints the tag; `make install
// PREFIX=…`, as the README's Install section runs it, puts that binary in
// PREFIX/bin; one commit later `herald version` prints what git describe
// says of that commit.
func TestMakeBuildPrintsTag(t *testing.T) {
	t.Parallel()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v (the test runs in a git checkout of Herald)", err)
	}
	dir := filepath.Join(t.TempDir(), "herald")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		var env []string
		for _, kv := range cmd.Environ() {
			if !strings.HasPrefix(kv, "VERSION=") { // make's VERSION would win over git describe
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("git", "clone", "-q", "--no-tags", strings.TrimSpace(string(root)), dir).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	const tag = "v0.99.0"
	run("git", "tag", "-a", tag, "-m", "Herald "+tag)
	run("make", "--no-print-directory", "build")
	if got := strings.SplitN(run(filepath.Join(dir, "bin", "herald"), "version"), "\n", 2)[0]; got != "herald "+tag {
		t.Fatalf("on the tag: %q, want %q", got, "herald "+tag)
	}
	prefix := filepath.Join(t.TempDir(), "home", ".local")
	run("make", "--no-print-directory", "install", "PREFIX="+prefix)
	if got := strings.SplitN(run(filepath.Join(prefix, "bin", "herald"), "version"), "\n", 2)[0]; got != "herald "+tag {
		t.Fatalf("make install PREFIX=%s: the installed herald says %q, want %q", prefix, got, "herald "+tag)
	}
	run("git", "commit", "-q", "--allow-empty", "-m", "after the release")
	run("make", "--no-print-directory", "build")
	want := "herald " + run("git", "describe", "--tags", "--always", "--dirty")
	if got := strings.SplitN(run(filepath.Join(dir, "bin", "herald"), "version"), "\n", 2)[0]; got != want || !strings.HasPrefix(got, "herald "+tag+"-1-g") {
		t.Fatalf("after the tag: %q, want %q", got, want)
	}
}
