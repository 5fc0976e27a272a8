package gateway

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(idleClientsEnv); spec != "" {
		// This process is the client side of an idle-memory measurement
		// (ws_idle_test.go), not a test run.
		os.Exit(runIdleClients(spec))
	}
	goleak.VerifyTestMain(m)
}
