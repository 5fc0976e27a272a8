package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release this binary is. `make build` and the container
// recipe set it with -ldflags "-X main.version=…"; left empty, init takes it
// from the module build information (go install …/cmd/herald@v0.1.0), else
// "dev".
var version string

// buildInfo is what `herald version` reports.
type buildInfo struct {
	Version   string // the release, or "dev"
	GoVersion string // the toolchain that built the binary
	Revision  string // the VCS commit, when the build recorded it
	Time      string // the commit's time, when recorded
	Modified  bool   // the work tree had uncommitted changes
}

// resolveBuildInfo says which version a binary is: stamped (the -X value)
// when set, else the main module's version from bi unless it is "(devel)",
// else "dev". bi may be nil (debug.ReadBuildInfo failed).
func resolveBuildInfo(stamped string, bi *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: stamped, GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			b.GoVersion = bi.GoVersion
		}
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	return b
}

// build describes this binary.
var build buildInfo

func init() {
	bi, _ := debug.ReadBuildInfo()
	build = resolveBuildInfo(version, bi)
	version = build.Version
}

// write prints the report of `herald version`: the version on the first
// line, then the toolchain and, when recorded, the commit.
func (b buildInfo) write(w io.Writer) {
	fmt.Fprintf(w, "herald %s\n", b.Version)
	fmt.Fprintf(w, "go:       %s %s/%s\n", b.GoVersion, runtime.GOOS, runtime.GOARCH)
	if b.Revision != "" {
		rev := b.Revision
		if b.Time != "" {
			rev += " (" + b.Time + ")"
		}
		if b.Modified {
			rev += " with uncommitted changes"
		}
		fmt.Fprintf(w, "revision: %s\n", rev)
	}
}

func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprintln(stdout, "Usage: herald version   (or herald --version)")
		fmt.Fprintln(stdout, "\nPrints the version, the Go toolchain that built the binary and, when recorded, its commit.")
		return nil
	}
	if len(args) > 0 {
		return fmt.Errorf("%w: version takes no arguments", errUsage)
	}
	build.write(stdout)
	return nil
}
