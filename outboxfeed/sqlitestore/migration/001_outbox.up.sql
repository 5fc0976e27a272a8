CREATE TABLE outbox (
	seq              INTEGER PRIMARY KEY AUTOINCREMENT,
	id               TEXT    NOT NULL UNIQUE DEFAULT (lower(
		hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-' ||
		substr('89ab', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))))
		CONSTRAINT outbox_id_format CHECK (length(id) = 36),
	tenant_id        TEXT    NOT NULL,
	channel          TEXT    NOT NULL,
	type             TEXT    NOT NULL
		CONSTRAINT outbox_type_format CHECK (length(type) BETWEEN 1 AND 128 AND type NOT GLOB '*[^a-z0-9_.-]*'),
	schema_version   INTEGER NOT NULL
		CONSTRAINT outbox_schema_version_positive CHECK (schema_version >= 1),
	payload          TEXT    NOT NULL
		CONSTRAINT outbox_payload_json CHECK (json_valid(payload)),
	freshness        TEXT    NOT NULL DEFAULT '{"mode":"immediate"}'
		CONSTRAINT outbox_freshness_mode CHECK (json_valid(freshness) AND (
			json_extract(freshness, '$.mode') = 'immediate'
			OR (json_extract(freshness, '$.mode') = 'advisory'
			    AND coalesce(json_extract(freshness, '$.authority'), '') <> ''))),
	occurred_at      INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
	kind             TEXT    NOT NULL DEFAULT 'notification'
		CONSTRAINT outbox_kind CHECK (kind IN ('notification', 'integration_event', 'journey_step_command', 'provider_side_effect')),
	state            TEXT    NOT NULL DEFAULT 'pending'
		CONSTRAINT outbox_state CHECK (state IN ('pending', 'processing', 'dispatched', 'dead_letter')),
	attempt          INTEGER NOT NULL DEFAULT 0
		CONSTRAINT outbox_attempt_non_negative CHECK (attempt >= 0),
	next_attempt_at  INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
	lease_owner      TEXT,
	lease_expires_at INTEGER,
	fence            INTEGER NOT NULL DEFAULT 0,
	last_error       TEXT,
	dispatched_at    INTEGER,
	dead_lettered_at INTEGER,
	CONSTRAINT outbox_pending_columns CHECK (state <> 'pending' OR (
		lease_owner IS NULL AND lease_expires_at IS NULL
		AND dispatched_at IS NULL AND dead_lettered_at IS NULL)),
	CONSTRAINT outbox_processing_columns CHECK (state <> 'processing' OR (
		lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL
		AND dispatched_at IS NULL AND dead_lettered_at IS NULL)),
	CONSTRAINT outbox_dispatched_columns CHECK (state <> 'dispatched' OR (
		dispatched_at IS NOT NULL AND lease_owner IS NULL AND lease_expires_at IS NULL
		AND dead_lettered_at IS NULL)),
	CONSTRAINT outbox_dead_letter_columns CHECK (state <> 'dead_letter' OR (
		dead_lettered_at IS NOT NULL AND last_error IS NOT NULL
		AND lease_owner IS NULL AND lease_expires_at IS NULL AND dispatched_at IS NULL))
);

-- The PostgreSQL indexes, in the same spirit (few, partial). SQLite uses a
-- partial index only when the query repeats its WHERE terms.
CREATE INDEX outbox_claim_idx ON outbox (seq) WHERE state = 'pending';
CREATE INDEX outbox_processing_channel_idx ON outbox (tenant_id, channel) WHERE state = 'processing';
CREATE INDEX outbox_retry_wait_idx ON outbox (tenant_id, channel, next_attempt_at)
	WHERE state = 'pending' AND attempt > 0;
CREATE INDEX outbox_dead_letter_idx ON outbox (dead_lettered_at) WHERE state = 'dead_letter';
CREATE INDEX outbox_dispatched_idx ON outbox (dispatched_at) WHERE state = 'dispatched';

CREATE TABLE outbox_replay (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	message_id  TEXT    NOT NULL,
	actor       TEXT    NOT NULL CONSTRAINT outbox_replay_actor CHECK (actor <> ''),
	reason      TEXT    NOT NULL CONSTRAINT outbox_replay_reason CHECK (reason <> ''),
	replayed_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
	failure     TEXT    NOT NULL
);
CREATE INDEX outbox_replay_message_idx ON outbox_replay (message_id);
