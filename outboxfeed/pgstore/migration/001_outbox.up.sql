CREATE TABLE herald.outbox (
	id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
	seq              bigint      GENERATED ALWAYS AS IDENTITY,
	tenant_id        text        NOT NULL,
	channel          text        NOT NULL,
	-- [a-z0-9_.-]{1,128}, without a regular expression: every CHECK runs
	-- on every update of the row, and a regex match costs more than the
	-- rest of a claim's row update.
	type             text        NOT NULL
		CONSTRAINT outbox_type_format CHECK (length(type) BETWEEN 1 AND 128
			AND ltrim(type, 'abcdefghijklmnopqrstuvwxyz0123456789_.-') = ''),
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
) WITH (fillfactor = 50);

-- Every index is paid for on each insert and on each update that is not
-- HOT (heap-only: the new row version stays on its page and no index is
-- touched). An update is HOT only when it changes no indexed column,
-- columns of index predicates included, and the page has room — hence
-- fillfactor 50 above: claiming a page of records (pending → processing)
-- writes a second version of each. So no index mentions state, the lease
-- columns, fence, attempt or next_attempt_at: claim, retry, release and
-- lease takeover are all HOT. Completion and dead-lettering set
-- dispatched_at / dead_lettered_at, leave the unresolved index and cost one
-- index insert each (primary key plus their own index).
--
-- Records not yet dispatched nor dead-lettered (pending and processing), in
-- seq order: the claim walks it from the head; also the backlog count.
CREATE INDEX outbox_unresolved_idx ON herald.outbox (seq)
	WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL;
-- Dead-letter count, listing and replay (queries must say
-- dead_lettered_at IS NOT NULL to use it).
CREATE INDEX outbox_dead_letter_idx ON herald.outbox (dead_lettered_at)
	WHERE dead_lettered_at IS NOT NULL;
-- Retention pruning of dispatched records (queries must say
-- dispatched_at IS NOT NULL to use it).
CREATE INDEX outbox_dispatched_idx ON herald.outbox (dispatched_at)
	WHERE dispatched_at IS NOT NULL;

-- The wake-up switch. The notify trigger sends a NOTIFY only while a
-- Worker has armed it (armed_until in the future): NOTIFY serializes the
-- commits of every transaction that sends one (PostgreSQL holds a global
-- lock on the notification queue through each such commit), so producers
-- must not send one while Workers are busy anyway. An idle Worker arms it
-- (and keeps re-arming it while idle); a woken Worker disarms it; a Worker
-- that died leaves it to expire.
CREATE TABLE herald.outbox_wakeup (
	id          boolean     PRIMARY KEY DEFAULT true CONSTRAINT outbox_wakeup_one_row CHECK (id),
	armed_until timestamptz
);
INSERT INTO herald.outbox_wakeup DEFAULT VALUES;

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
	IF EXISTS (SELECT 1 FROM herald.outbox_wakeup WHERE armed_until > statement_timestamp()) THEN
		PERFORM pg_notify('herald_outbox', '');
	END IF;
	RETURN NULL;
END
$fn$;
