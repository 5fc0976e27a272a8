package testenv

import (
	"os"
	"strings"
)

// HeraldEnv is this process's environment without any HERALD_* variable,
// for a herald the test runs: its flags are its whole configuration, as
// on a fresh machine with no PostgreSQL or Redis configured.
func HeraldEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HERALD_") {
			env = append(env, kv)
		}
	}
	return env
}
