package outboxfeed

// pgMigration is one versioned step of the PostgreSQL schema. Applied
// versions are recorded in herald.schema_migrations; a step never changes
// once released (add a new one instead).
type pgMigration struct {
	version int
	name    string
	sql     string
}

var pgMigrations = []pgMigration{
	{1, "outbox", pgSchemaV1},
}

// Advisory-lock keys (per database): one serializes migrations, one
// serializes claimers so per-channel order holds across Worker processes.
const (
	pgMigrateLockKey int64 = 0x6865_7261_6c64_0001
	pgClaimLockKey   int64 = 0x6865_7261_6c64_0002
)

// pgNotifyChannel is the LISTEN/NOTIFY channel of the wake-up trigger.
const pgNotifyChannel = "herald_outbox"

const pgSchemaV1 = `
CREATE TABLE herald.outbox (
	id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
	seq              bigint      GENERATED ALWAYS AS IDENTITY,
	tenant_id        text        NOT NULL,
	channel          text        NOT NULL,
	type             text        NOT NULL
		CONSTRAINT outbox_type_format CHECK (type ~ '^[a-z0-9_.-]{1,128}$'),
	schema_version   int         NOT NULL
		CONSTRAINT outbox_schema_version_positive CHECK (schema_version >= 1),
	payload          jsonb       NOT NULL,
	freshness        jsonb       NOT NULL DEFAULT '{"mode":"immediate"}'
		CONSTRAINT outbox_freshness_mode CHECK (
			freshness->>'mode' = 'immediate'
			OR (freshness->>'mode' = 'advisory' AND coalesce(freshness->>'authority', '') <> '')),
	occurred_at      timestamptz NOT NULL DEFAULT now(),
	kind             text        NOT NULL DEFAULT 'notification'
		CONSTRAINT outbox_kind CHECK (kind IN ('notification', 'integration_event', 'journey_step_command', 'provider_side_effect')),
	state            text        NOT NULL DEFAULT 'pending'
		CONSTRAINT outbox_state CHECK (state IN ('pending', 'processing', 'dispatched', 'dead_letter')),
	attempt          int         NOT NULL DEFAULT 0
		CONSTRAINT outbox_attempt_non_negative CHECK (attempt >= 0),
	next_attempt_at  timestamptz NOT NULL DEFAULT now(),
	lease_owner      text,
	lease_expires_at timestamptz,
	fence            bigint      NOT NULL DEFAULT 0,
	last_error       text,
	dispatched_at    timestamptz,
	dead_lettered_at timestamptz,
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

-- Every index is paid for on each insert or state change (a state change
-- is never a HOT update), so there are few, and partial.
--
-- Claim candidates in order; also the pending count and the head of line.
CREATE INDEX outbox_claim_idx ON herald.outbox (seq) WHERE state = 'pending';
-- Records in processing, per channel: the claim's blocking probe, the
-- requeue of expired leases and the processing count (at most batch size
-- times the number of Workers rows).
CREATE INDEX outbox_processing_channel_idx ON herald.outbox (tenant_id, channel)
	WHERE state = 'processing';
-- Retries waiting for their time: the claim's other blocking probe. Only
-- a retry (attempt > 0) has a future next_attempt_at.
CREATE INDEX outbox_retry_wait_idx ON herald.outbox (tenant_id, channel, next_attempt_at)
	WHERE state = 'pending' AND attempt > 0;
-- Dead-letter count, listing and replay.
CREATE INDEX outbox_dead_letter_idx ON herald.outbox (dead_lettered_at) WHERE state = 'dead_letter';
-- Retention pruning of dispatched records.
CREATE INDEX outbox_dispatched_idx ON herald.outbox (dispatched_at) WHERE state = 'dispatched';

CREATE TABLE herald.outbox_replay (
	id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	message_id  uuid        NOT NULL,
	actor       text        NOT NULL CONSTRAINT outbox_replay_actor CHECK (actor <> ''),
	reason      text        NOT NULL CONSTRAINT outbox_replay_reason CHECK (reason <> ''),
	replayed_at timestamptz NOT NULL DEFAULT now(),
	failure     text        NOT NULL
);
CREATE INDEX outbox_replay_message_idx ON herald.outbox_replay (message_id);

CREATE FUNCTION herald.stage_notification(
	tenant_id text, channel text, type text, schema_version int, payload jsonb,
	id uuid DEFAULT NULL, freshness jsonb DEFAULT NULL
) RETURNS uuid LANGUAGE sql AS $fn$
	INSERT INTO herald.outbox (id, tenant_id, channel, type, schema_version, payload, freshness)
	VALUES (coalesce($6, gen_random_uuid()), $1, $2, $3, $4, $5,
	        coalesce($7, '{"mode":"immediate"}'::jsonb))
	RETURNING id
$fn$;

CREATE FUNCTION herald.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	PERFORM pg_notify('herald_outbox', '');
	RETURN NULL;
END
$fn$;
`

const pgCreateNotifyTrigger = `
CREATE TRIGGER outbox_notify AFTER INSERT ON herald.outbox
	FOR EACH STATEMENT EXECUTE FUNCTION herald.outbox_notify()`

const pgDropNotifyTrigger = `DROP TRIGGER IF EXISTS outbox_notify ON herald.outbox`

const pgHasNotifyTrigger = `
SELECT EXISTS (SELECT 1 FROM pg_trigger
	WHERE tgrelid = 'herald.outbox'::regclass AND tgname = 'outbox_notify' AND NOT tgisinternal)`
