// Package heraldenv is the environment a program or test gives a herald
// it runs: its own, without any HERALD_* variable.
package heraldenv

import (
	"os"
	"strings"
)

// Clean is this process's environment without any HERALD_* variable, for
// a herald this process runs: its flags are its whole configuration, as
// on a fresh machine with no PostgreSQL or Redis configured.
func Clean() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HERALD_") {
			env = append(env, kv)
		}
	}
	return env
}
