package fanout

import "fmt"

func wrapf(what string, err error) error {
	return fmt.Errorf("fanout: %s: %w", what, err)
}
