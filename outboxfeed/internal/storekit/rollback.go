package storekit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/heraldgw/herald/outboxfeed"
)

// SchemaVersion is the version of a store's schema, whose applied
// versions applied reads (see Current).
func SchemaVersion(ctx context.Context, applied func(context.Context) ([]int, error)) (int, error) {
	a, err := applied(ctx)
	if err == nil {
		var v int
		if v, err = Current(a); err == nil {
			return v, nil
		}
	}
	return 0, fmt.Errorf("outboxfeed: schema version: %w", err)
}

// MigrateTo is a store's MigrateTo once the store has said how: it
// refuses a version outside 0..known (wrapping outboxfeed.ErrInvalidConfig),
// reads the current version with current, and goes up with up when
// version is not below it, back with back otherwise.
func MigrateTo(ctx context.Context, version, known int, current func(context.Context) (int, error), up, back func(context.Context, int) error) error {
	if version < 0 || version > known {
		return fmt.Errorf("%w: schema version %d: this release knows 1 to %d", outboxfeed.ErrInvalidConfig, version, known)
	}
	cur, err := current(ctx)
	if err != nil {
		return err
	}
	if version >= cur {
		return up(ctx, version)
	}
	return back(ctx, version)
}

// DownTx is a store's migration transaction as Down uses it.
type DownTx interface {
	// Exec runs a statement.
	Exec(ctx context.Context, query string, args ...any) error
	// Strings runs a query of one text column and returns its rows.
	Strings(ctx context.Context, query string) ([]string, error)
}

// Down reverses, in tx, the steps of migs that take a schema whose
// applied versions are applied back to version: newest first, each only
// when its down check names no reason, each forgotten with forget (a
// statement deleting the applied version given as its one argument).
// Refusals wrap outboxfeed.ErrRollbackRefused; when a step on the way has
// no down step the message ends with advice(version, len(applied)).
func Down(ctx context.Context, tx DownTx, migs []Migration, applied []int, version int, forget string, advice func(to, cur int) string, log *slog.Logger) error {
	steps, err := DownSteps(migs, applied, version)
	if errors.Is(err, ErrIrreversible) {
		return fmt.Errorf("%w: %v.\n%s", outboxfeed.ErrRollbackRefused, err, advice(version, len(applied)))
	}
	if err != nil {
		return fmt.Errorf("%w: %v", outboxfeed.ErrRollbackRefused, err)
	}
	for _, m := range steps {
		if m.DownCheck != "" {
			reasons, err := tx.Strings(ctx, m.DownCheck)
			if err != nil {
				return fmt.Errorf("migration %d (%s): down check: %w", m.Version, m.Name, err)
			}
			if len(reasons) > 0 {
				return fmt.Errorf("%w: migration %d (%s) cannot be reversed now:\n  %s", outboxfeed.ErrRollbackRefused,
					m.Version, m.Name, strings.Join(reasons, "\n  "))
			}
		}
		if err := tx.Exec(ctx, m.Down); err != nil {
			return fmt.Errorf("migration %d (%s): down: %w", m.Version, m.Name, err)
		}
		if err := tx.Exec(ctx, forget, m.Version); err != nil {
			return err
		}
		log.Info("outbox migration reversed", "version", m.Version, "name", m.Name)
	}
	return nil
}

// Advice is what to do when the schema cannot be taken back to version
// to from cur (docs/runbooks/rollback-schema.md says the same): step 3,
// set aside, is how the store keeps the current schema aside and
// leftovers where the dead letters and dispatched records stay.
func Advice(to int, setAside, leftovers string) string {
	return fmt.Sprintf(`To run a release whose schema is version %d, drain the outbox and let that release create its schema anew (docs/runbooks/rollback-schema.md):
  1. stop the producers' staging, keep the Workers of this release running, and wait until
     herald outbox stats says "oldest waiting record: none";
  2. stop every Worker (herald feed, and herald serve without --feed=false);
  3. %s
  4. with the older release: herald migrate, then start its Workers, then the producers.
Dead letters and dispatched records stay in %s.`, to, setAside, leftovers)
}
