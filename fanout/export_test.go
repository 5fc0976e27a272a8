package fanout

// NewTestMemoryBroker is newTestMemoryBroker, for the tests in package
// fanout_test (those that run fanouttest, which imports fanout).
var NewTestMemoryBroker = newTestMemoryBroker
