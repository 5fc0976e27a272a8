package webhook

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(benchReceiverEnv) != "" {
		// The benchmarks' receiver runs in a child process of the test
		// binary, so the benchmark's own CPU time is the client's alone.
		os.Exit(runBenchReceiver())
	}
	goleak.VerifyTestMain(m)
}
