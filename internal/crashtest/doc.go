// Package crashtest holds Herald's end-to-end failure tests: they build the
// herald binary, run it as real processes against the real PostgreSQL and
// Redis, and break things underneath it — a `herald feed` process killed
// with SIGKILL in the middle of a batch, and a private PostgreSQL cluster
// stopped and started again while `herald serve` dispatches — then check
// that no outbox record was lost, dead-lettered or reordered.
//
// The package has no exported API; everything lives in its tests.
package crashtest
