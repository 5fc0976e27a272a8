package redisbroker

import "errors"

var (
	// ErrNotReplicated is wrapped by a Publish that Redis accepted but
	// fewer than Config.WaitReplicas replicas acknowledged in time; a retry
	// is answered with the publication when it is in the history (see
	// fanout.Broker.Publish).
	ErrNotReplicated = errors.New("not acknowledged by enough replicas")
	// ErrNotStarted is returned by Subscribe before Start.
	ErrNotStarted = errors.New("not started")
)
