// Package alertstest holds no code: its test runs promtool over the
// Prometheus alert rules in docs/alerts, so that `go test ./...` checks
// them (promtool check rules) and runs their unit tests (promtool test
// rules on docs/alerts/*_test.yml and docs/alerts/examples/*_test.yml). promtool must be installed: Debian's
// `prometheus` package ships it as /usr/bin/promtool, and
// scripts/test-services.sh (run by `make test`) installs it when missing.
package alertstest
