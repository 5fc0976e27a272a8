package stage

import (
	"database/sql"
	"fmt"
	"reflect"
)

// Dialect is the SQL a *sql.Tx speaks. The zero value is no dialect.
type Dialect int

// Dialects StageSQL writes.
const (
	// Postgres is PostgreSQL: herald.outbox, $n placeholders, uuid and
	// jsonb casts. Tested with github.com/jackc/pgx/v5/stdlib.
	Postgres Dialect = iota + 1
	// SQLite is Herald's embedded SQLite file: table outbox, ids made in
	// Go, times as integer microseconds. Tested with modernc.org/sqlite.
	SQLite
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// driverDialects maps the package of a database/sql driver to its dialect.
// Only drivers Herald is tested with are named: another driver is an
// error, and its caller passes the Dialect itself.
var driverDialects = map[string]Dialect{
	"github.com/jackc/pgx/v5/stdlib": Postgres,
	"modernc.org/sqlite":             SQLite,
}

// DetectDialect returns the dialect of db's driver: Postgres for pgx's
// stdlib driver, SQLite for modernc.org/sqlite. Any other driver is an
// error wrapping ErrUnknownDialect. It reads only the driver's type, so it
// needs no connection and imports no driver.
func DetectDialect(db *sql.DB) (Dialect, error) {
	t := reflect.TypeOf(db.Driver())
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil {
		if d, ok := driverDialects[t.PkgPath()]; ok {
			return d, nil
		}
	}
	return 0, fmt.Errorf("stage: %w: driver %v: pass stage.Postgres or stage.SQLite to StageSQL", ErrUnknownDialect, reflect.TypeOf(db.Driver()))
}
