package benchkit

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
)

// Command is the command line of one of the load-test programs: the
// flags it has registered on flag.CommandLine, parsed and checked the
// same way by each.
type Command struct {
	// Name is the program's name (for example "outboxbench"): the
	// usage line, the prefix of its error messages and the package
	// under ./loadtest in CommandLine.
	Name string
	// Summary is the sentence the usage text gives under the usage line.
	Summary string
	// CPUProfile, when not empty, is the usage of a -cpuprofile flag
	// that names a file for this process's CPU profile; empty, the
	// program has no such flag.
	CPUProfile string
}

// Parse parses the command line and exits with status 2 when an
// argument is left over or validate reports the flags inconsistent. With
// CPUProfile set it starts the profile -cpuprofile names; the returned
// function stops it (and does nothing without one).
func (c Command) Parse(validate func() error) (stopProfile func()) {
	var cpuProfile *string
	if c.CPUProfile != "" {
		cpuProfile = flag.String("cpuprofile", "", c.CPUProfile)
	}
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s [flags]\n\n%s\n\nFlags:\n", c.Name, c.Summary)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		c.exit(2, fmt.Errorf("unexpected argument %q", flag.Arg(0)))
	}
	if err := validate(); err != nil {
		c.exit(2, err)
	}
	if cpuProfile == nil || *cpuProfile == "" {
		return func() {}
	}
	f, err := os.Create(*cpuProfile)
	if err != nil {
		c.exit(2, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		c.exit(2, fmt.Errorf("cpu profile: %w", err))
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }
}

// Main parses the command line as Parse does, then calls run with a
// context that an interrupt or SIGTERM cancels; an error from run is
// printed and the process exits with status 1.
func (c Command) Main(validate func() error, run func(ctx context.Context) error) {
	stopProfile := c.Parse(validate)
	defer stopProfile()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		stop()
		stopProfile()
		c.exit(1, err)
	}
}

// CommandLine is how the program was invoked, for the report.
func (c Command) CommandLine() string {
	return "go run ./loadtest/" + c.Name + " " + strings.Join(os.Args[1:], " ")
}

// exit prints err, prefixed with the program's name unless it already
// is, and exits with code.
func (c Command) exit(code int, err error) {
	msg := err.Error()
	if !strings.HasPrefix(msg, c.Name+": ") {
		msg = c.Name + ": " + msg
	}
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(code)
}
