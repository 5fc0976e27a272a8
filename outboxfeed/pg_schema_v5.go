package outboxfeed

import "strings"

// pgSchemaV5 takes done segments out of the tables claims read.
//
// A claim's statements read herald.outbox by (part, xid, seq), which no
// seq range can narrow, so each of them opens every segment attached to
// it: with a week of retention that is hundreds of segments per claim, and
// a claim's cost grew with the retention. A full segment whose records are
// all done now moves (detach, attach) to herald.outbox_archive, which only
// operators' reads (herald.outbox_records, through herald.outbox_all)
// see, and is dropped from there once past the retention. herald.outbox
// keeps the default partition, the segment receiving records, the few
// made ahead of it and any not yet done.
//
// herald.outbox_segment records when a segment was archived and the
// newest occurred_at it holds, so the Pruner tells an archived segment's
// age without reading it.
var pgSchemaV5 = `
CREATE TABLE herald.outbox_archive (LIKE herald.outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED)
	PARTITION BY RANGE (seq);
CREATE INDEX outbox_archive_part_xid_idx ON herald.outbox_archive (part, xid, seq);
CREATE INDEX outbox_archive_id_idx ON herald.outbox_archive (id);
ALTER TABLE herald.outbox_segment ADD COLUMN archived_at timestamptz, ADD COLUMN newest_at timestamptz;

CREATE VIEW herald.outbox_all AS
SELECT ` + pgOutboxColumns + ` FROM herald.outbox
UNION ALL
SELECT ` + pgOutboxColumns + ` FROM herald.outbox_archive;
` + strings.Replace(strings.Replace(pgRecordsView,
	"CREATE VIEW", "CREATE OR REPLACE VIEW", 1),
	"FROM herald.outbox o\n", "FROM herald.outbox_all o\n", 1)

// pgOutboxColumns are herald.outbox's columns, in table order.
const pgOutboxColumns = `id, seq, xid, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind, part`
