package pgstore

import (
	"embed"

	"github.com/heraldgw/herald/outboxfeed/internal/storekit"
)

// migrationFiles are the schema's migrations, one file each
// (storekit.Migration).
//
//go:embed migration/*.sql
var migrationFiles embed.FS

// pgMigrations are the schema's migrations, in version order, and
// pgMigrationsErr why they could not be read (a file misnamed, or a
// directive that names no definition: a build mistake, which
// TestPostgresMigrationFiles reports); every migration returns it.
var pgMigrations, pgMigrationsErr = storekit.ReadMigrations(migrationFiles, "migration")

// Advisory-lock keys (per database): one serializes migrations (and
// segment creation), one lets Pruners take turns removing segments. (Key
// 2 serialized the per-record claims of earlier versions.)
const (
	pgMigrateLockKey int64 = 0x6865_7261_6c64_0001
	pgPruneLockKey   int64 = 0x6865_7261_6c64_0003
)

// pgNotifyChannel is the LISTEN/NOTIFY channel of the wake-up trigger.
const pgNotifyChannel = "herald_outbox"

// pgCreateNotifyTrigger installs the wake-up trigger as migration 14 has
// it: its function runs only while the wake-up switch's copy is not 0
// (disarmed, or never armed).
const pgCreateNotifyTrigger = `
CREATE TRIGGER outbox_notify AFTER INSERT ON herald.outbox
	FOR EACH STATEMENT WHEN (pg_sequence_last_value('herald.outbox_wakeup_until') > 0)
	EXECUTE FUNCTION herald.outbox_notify()`

// pgCreateNotifyTriggerBefore14 installs it in a schema older than
// migration 14 (tests build one), which may have no such sequence.
const pgCreateNotifyTriggerBefore14 = `
CREATE TRIGGER outbox_notify AFTER INSERT ON herald.outbox
	FOR EACH STATEMENT EXECUTE FUNCTION herald.outbox_notify()`

// pgWhenTriggerVersion is the migration that gave the trigger its WHEN
// condition.
const pgWhenTriggerVersion = 14

const pgDropNotifyTrigger = `DROP TRIGGER IF EXISTS outbox_notify ON herald.outbox`

const pgHasNotifyTrigger = `
SELECT EXISTS (SELECT 1 FROM pg_trigger
	WHERE tgrelid = 'herald.outbox'::regclass AND tgname = 'outbox_notify' AND NOT tgisinternal)`
