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

// pgCreateNotifyTrigger installs the wake-up trigger. From migration 16
// the insert trigger outbox_stage, which sets part, runs the function that
// also sends the wake-up (CREATE OR REPLACE TRIGGER does not wait for the
// Workers' reads); at 14 and 15 it is the statement trigger outbox_notify,
// whose function runs only while the wake-up switch's copy is not 0
// (disarmed, or never armed).
var pgCreateNotifyTrigger = pgSetNotifyTrigger("herald.outbox_stage_notify()", `CREATE TRIGGER outbox_notify AFTER INSERT ON herald.outbox
			FOR EACH STATEMENT WHEN (pg_sequence_last_value('herald.outbox_wakeup_until') > 0)
			EXECUTE FUNCTION herald.outbox_notify();`)

// pgDropNotifyTrigger takes the wake-up trigger away: from migration 16
// outbox_stage then only sets part.
var pgDropNotifyTrigger = pgSetNotifyTrigger("herald.outbox_stage()", `DROP TRIGGER IF EXISTS outbox_notify ON herald.outbox;`)

// pgSetNotifyTrigger is the statement that, from migration 16 (where
// function stage exists), makes the insert trigger outbox_stage run stage,
// and before it runs before16.
func pgSetNotifyTrigger(stage, before16 string) string {
	return `
DO $do$
BEGIN
	IF to_regprocedure('` + stage + `') IS NOT NULL THEN
		CREATE OR REPLACE TRIGGER outbox_stage BEFORE INSERT ON herald.outbox
			FOR EACH ROW EXECUTE FUNCTION ` + stage + `;
	ELSE
		` + before16 + `
	END IF;
END
$do$`
}

// pgCreateNotifyTriggerBefore14 installs it in a schema older than
// migration 14 (tests build one), which may have no such sequence.
const pgCreateNotifyTriggerBefore14 = `
CREATE TRIGGER outbox_notify AFTER INSERT ON herald.outbox
	FOR EACH STATEMENT EXECUTE FUNCTION herald.outbox_notify()`

// pgWhenTriggerVersion is the migration that gave the trigger its WHEN
// condition.
const pgWhenTriggerVersion = 14

// pgHasNotifyTrigger tells whether the wake-up trigger is installed: the
// statement trigger outbox_notify before migration 16, from it the insert
// trigger running herald.outbox_stage_notify.
const pgHasNotifyTrigger = `
SELECT EXISTS (SELECT 1 FROM pg_trigger
	WHERE tgrelid = 'herald.outbox'::regclass AND NOT tgisinternal AND (tgname = 'outbox_notify'
		OR tgname = 'outbox_stage' AND tgfoid = to_regprocedure('herald.outbox_stage_notify()')))`
