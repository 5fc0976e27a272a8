// Package errwrap holds the phrase every error of the fanout packages
// starts with, shared by fanout and its brokers in subpackages.
package errwrap

import "fmt"

// Wrap wraps err as "fanout: what: err".
func Wrap(what string, err error) error {
	return fmt.Errorf("fanout: %s: %w", what, err)
}
