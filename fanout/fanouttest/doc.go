// Package fanouttest is the conformance suite of a fanout.Broker: every
// broker Herald ships runs it from its tests (RunRecover, RunFence,
// RunIdempotent), and a broker written elsewhere can run it too. The
// helpers it exports (Msg, MustPublish, Recorder, …) are for the tests of
// brokers and of what is built on them.
package fanouttest
