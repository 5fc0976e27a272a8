package testenv

import "github.com/heraldgw/herald/internal/heraldenv"

// HeraldEnv is this process's environment without any HERALD_* variable,
// for a herald the test runs: its flags are its whole configuration, as
// on a fresh machine with no PostgreSQL or Redis configured.
func HeraldEnv() []string { return heraldenv.Clean() }
