-- migration 2 indexes each channel's pending records in order, for the
-- claim's walk from channel to channel (released; dropped by migration 3).

CREATE INDEX outbox_pending_channel_idx ON outbox (tenant_id, channel, seq) WHERE state = 'pending';
