package main

import (
	"strings"
	"testing"
)

// TestHelpAndVersionFlags: asked for, help is output (stdout, exit 0);
// without a command it is an error (stderr, exit 2). --version is the
// version command, whose own --help works.
func TestHelpAndVersionFlags(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := herald(t, args...)
		if code != 0 || !strings.Contains(out, "Commands:") || !strings.Contains(out, "serve") || errOut != "" {
			t.Errorf("herald %s: exit %d, stdout %q, stderr %q; want the usage on stdout, exit 0", args[0], code, out, errOut)
		}
	}
	if code, out, errOut := herald(t); code != 2 || out != "" || !strings.Contains(errOut, "Commands:") {
		t.Errorf("herald: exit %d, stdout %q, stderr %q; want the usage on stderr, exit 2", code, out, errOut)
	}
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		code, out, errOut := herald(t, args...)
		if code != 0 || !strings.HasPrefix(out, "herald "+version+"\n") || errOut != "" {
			t.Errorf("herald %s: exit %d, stdout %q, stderr %q", args[0], code, out, errOut)
		}
	}
	for _, args := range [][]string{{"version", "--help"}, {"version", "-h"}, {"--version", "--help"}} {
		if code, out, _ := herald(t, args...); code != 0 || !strings.Contains(out, "Usage: herald version") {
			t.Errorf("herald %s: exit %d, stdout %q", strings.Join(args, " "), code, out)
		}
	}
	if code, _, errOut := herald(t, "version", "extra"); code != 2 || !strings.Contains(errOut, "takes no arguments") {
		t.Errorf("herald version extra: exit %d, %q", code, errOut)
	}
}
