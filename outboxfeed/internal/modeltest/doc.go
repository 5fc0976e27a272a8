// Package modeltest is the model-based test of the outbox's durable path:
// producers, Workers, a broker and an operator act at random on a real
// store (outboxfeed/pgstore, outboxfeed/sqlitestore), and a model of what
// docs/delivery.md promises checks the channel histories the broker ends
// up with. The package has no API: everything lives in its tests
// (TestModelPostgres, TestModelSQLite).
//
// One seed drives every random choice of a run (its plan: the producers'
// transactions, the records' fates at the broker, the Workers' settings,
// the events of the run and when they happen). Events are triggered by
// progress (a count of finished producer transactions), never by the
// clock; the interleavings still vary from one execution to the next, so
// a seed that failed once may need a few runs to fail again.
//
// What a run does (PostgreSQL; the SQLite store has one partition, one
// writer, no prepared transactions and no transaction held open):
//
//   - producers, each on its own connection, stage in business
//     transactions: some write a business row first (their xid is assigned
//     before they stage), some stage in savepoints (some rolled back to the
//     savepoint), some stay open until other transactions finished, a few
//     are prepared (PREPARE TRANSACTION, COMMIT/ROLLBACK PREPARED, with
//     herald.notify off as docs/delivery.md says), some roll back, a few
//     stage a burst on one channel;
//   - each record has a fate at the broker: accepted, refused with
//     Retryable a few times, refused with Permanent (a dead letter, which
//     the operator replays), refused until its attempts run out (the same),
//     or accepted with the answer lost (the documented duplicate);
//   - several Workers run at once, each with its own store connections and
//     settings; the broker goes down for a while; a Worker is paused in a
//     publish until its lease expired and another took its partition over;
//     a Worker is stopped mid-batch (Stop, or its Start context cancelled);
//     a Worker's process dies (its last publish accepted, every later store
//     call and publish fails); the partition count changes while producers
//     stage; dead letters are replayed, one after the change.
//
// The model then checks, for the broker's channel histories:
//
//   - every committed record is delivered, no rolled-back one ever;
//   - each record is in its channel's history once, plus at most one copy
//     per documented cause: a publish whose answer was lost after the
//     broker accepted it, a replay of a record already in the history. A
//     takeover adds no copy (the broker keeps the whole history here);
//   - per channel, a record staged after another record's transaction
//     committed comes after it, and records of one transaction come in
//     staging order (first copies; records that were dead-lettered are
//     left out, a replay publishes them late by design);
//   - nothing is stuck: the run ends with every committed record
//     dispatched, no dead letter left, no backlog and no partition-count
//     change in progress.
//
// Settings (environment):
//
//	HERALD_MODEL_SEED      the first run's seed (default: random, logged)
//	HERALD_MODEL_OPS       producer transactions per run (default 80)
//	HERALD_MODEL_RUNS      runs per store, seeds SEED, SEED+1, … (default 1)
//	HERALD_MODEL_DURATION  start runs until this long has passed (a soak;
//	                       overrides RUNS), e.g. 10m
//	HERALD_MODEL_BATCH     every Worker's BatchSize (default: random per Worker)
//	HERALD_MODEL_STALL     how long without a delivery means stuck (default 45s)
//
// scripts/soak-outbox.sh (make soak-outbox) runs the soak.
//
// Replay a seed with
//
//	HERALD_MODEL_SEED=<seed> HERALD_MODEL_OPS=<ops> go test -race -count=1 -run 'TestModel(Postgres|SQLite)$' ./outboxfeed/internal/modeltest/
//
// On PostgreSQL the test starts a server of its own
// (testenv.StartPrivatePG), since producers prepare transactions and the
// shared test server has max_prepared_transactions at 0.
package modeltest
