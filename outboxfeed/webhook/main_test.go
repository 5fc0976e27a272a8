package webhook

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/heraldgw/herald/internal/hookrecv"
)

func TestMain(m *testing.M) {
	// The benchmarks' receiver runs in a child process of the test
	// binary, so the benchmark's own CPU time is the client's alone.
	hookrecv.MaybeServe()
	goleak.VerifyTestMain(m)
}
