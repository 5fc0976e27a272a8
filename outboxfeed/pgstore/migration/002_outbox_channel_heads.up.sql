-- migration 2 indexes each channel's unresolved records in order, so a
-- claim can walk from channel to channel (one index probe each) to reach
-- channels whose records lie beyond the head of the line — behind another
-- channel's burst — without reading the burst. Like the unresolved index
-- it only costs producers an insert: a claim leaves the row's indexed
-- columns alone (HOT), and a completion's new row version is outside the
-- predicate.

CREATE INDEX outbox_channel_head_idx ON herald.outbox (tenant_id, channel, seq)
	WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL;
