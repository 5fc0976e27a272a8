package outboxfeed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/heraldgw/herald/internal/promreg"
	"github.com/heraldgw/herald/internal/ratelog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/internal/lifecycle"
)

// DefaultSegmentRecords is how many records one segment of the
// PostgreSQL store holds by default (PrunerConfig.SegmentRecords).
const DefaultSegmentRecords = 1_000_000

// ArchiveLockTimeoutMin is the first wait of a done segment's move out of
// the tables claims read for their lock (PrunerConfig.ArchiveLockTimeout).
const ArchiveLockTimeoutMin = 20 * time.Millisecond

// SegmentKeeper is a store whose retention works on whole segments (the
// PostgreSQL store): the Pruner calls it on every run, to create the
// segments the next records need, move done ones out of the way of the
// claims (waiting at most archiveWait for the table's lock) and drop
// those past the retention. It returns how many it removed.
type SegmentKeeper interface {
	KeepSegments(ctx context.Context, size int64, retention, archiveWait time.Duration) (removed int, err error)
}

// DefaultRetention is how long dispatched records are kept by default.
const DefaultRetention = 7 * 24 * time.Hour

// PrunerConfig tunes a Pruner. The zero value is valid.
type PrunerConfig struct {
	// Retention is how long a dispatched record is kept after its
	// dispatched_at. Default: DefaultRetention (7 days).
	Retention time.Duration
	// BatchSize is how many retry-queue rows one delete transaction
	// removes. Default: 1000.
	BatchSize int
	// SegmentRecords is how many records one segment of herald.outbox
	// holds (PostgreSQL): retention drops whole segments, once all their
	// records are done and the newest is older than Retention, so records
	// of a segment that fills slowly are kept longer. Default:
	// DefaultSegmentRecords (1,000,000).
	SegmentRecords int64
	// Interval is the time between two prune runs (the first runs at
	// Start). Default: 1m.
	Interval time.Duration
	// ArchiveLockTimeout bounds how long moving a done segment out of
	// herald.outbox waits for the table's lock (PostgreSQL), and so how
	// long producers' inserts can queue behind it. A move waits 20ms at
	// first and twice as long after each run it could not get the lock
	// (producers' transactions kept the table busy), up to this bound, so
	// the move happens even while transactions always overlap. Default: 1s.
	ArchiveLockTimeout time.Duration
	// Logger receives prune results and failures; repeated failures are
	// rate-limited to one per LogEvery. Default: discard.
	Logger *slog.Logger
	// LogEvery is the rate limit of repeated failure logs. Default: 30s.
	LogEvery time.Duration
	// Registerer receives herald_outbox_pruned_total. Default: nil, not
	// registered.
	Registerer prometheus.Registerer
}

func (c PrunerConfig) withDefaults() PrunerConfig {
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.BatchSize == 0 {
		c.BatchSize = defaultPurgeBatch
	}
	if c.Interval == 0 {
		c.Interval = time.Minute
	}
	if c.SegmentRecords == 0 {
		c.SegmentRecords = DefaultSegmentRecords
	}
	if c.ArchiveLockTimeout == 0 {
		c.ArchiveLockTimeout = time.Second
	}
	if c.LogEvery == 0 {
		c.LogEvery = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c PrunerConfig) validate() error {
	switch {
	case c.Retention < 0:
		return fmt.Errorf("%w: Retention %v: must not be negative", ErrInvalidConfig, c.Retention)
	case c.BatchSize < 1 || c.BatchSize > maxBatch:
		return fmt.Errorf("%w: BatchSize %d: must be between 1 and %d", ErrInvalidConfig, c.BatchSize, maxBatch)
	case c.SegmentRecords < 1:
		return fmt.Errorf("%w: SegmentRecords %d: must be ≥ 1", ErrInvalidConfig, c.SegmentRecords)
	case c.ArchiveLockTimeout < ArchiveLockTimeoutMin:
		return fmt.Errorf("%w: ArchiveLockTimeout %v: must be at least %v", ErrInvalidConfig, c.ArchiveLockTimeout, ArchiveLockTimeoutMin)
	case c.Interval < 0:
		return fmt.Errorf("%w: Interval %v: must not be negative", ErrInvalidConfig, c.Interval)
	case c.LogEvery < 0:
		return fmt.Errorf("%w: LogEvery %v: must not be negative", ErrInvalidConfig, c.LogEvery)
	}
	return nil
}

// Pruner deletes dispatched records older than the retention, every
// Interval, in small batches (one short transaction each) so neither
// producers nor Workers wait on it. Dead letters are never pruned: they
// wait for an operator (Admin.Replay or Admin.Purge). It is a service:
// Start once, Stop to end it; both are safe to call twice, and Stop before
// Start. Several Pruners on one store are harmless.
type Pruner struct {
	admin  Admin
	segs   SegmentKeeper // nil for a store without segments
	cfg    PrunerConfig
	log    *slog.Logger
	limit  *ratelog.Limiter
	pruned prometheus.Counter

	svc lifecycle.Service
}

// NewPruner builds a Pruner over store (which must have an Admin: both
// PGStore and SQLiteStore do).
func NewPruner(store Store, cfg PrunerConfig) (*Pruner, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: NewPruner needs a store", ErrInvalidConfig)
	}
	admin, err := AdminOf(store)
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pruned := promreg.Counter("herald_outbox_pruned_total", "Dispatched outbox records deleted by the retention Pruner.")
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(pruned); err != nil {
			return nil, fmt.Errorf("outboxfeed: register pruner metrics: %w", err)
		}
	}
	segs, _ := store.(SegmentKeeper)
	return &Pruner{
		admin: admin, segs: segs, cfg: cfg, pruned: pruned,
		log:   cfg.Logger.With("component", "outbox-pruner"),
		limit: ratelog.NewLimiter(cfg.LogEvery, 1),
	}, nil
}

// Start runs a prune at once and then every Interval, until Stop or until
// ctx ends. It returns at once.
// A second Start returns an error wrapping ErrStarted, a Start after Stop
// one wrapping ErrStopped.
func (p *Pruner) Start(ctx context.Context) error {
	if err := p.svc.Start(ctx, nil, p.run); err != nil {
		return fmt.Errorf("outboxfeed: pruner start: %w", err)
	}
	return nil
}

// Stop ends the Pruner; a batch in progress is cancelled (its transaction
// rolls back whole). It is safe before Start and twice.
func (p *Pruner) Stop() { p.svc.Stop(nil) }

func (p *Pruner) run(ctx context.Context) {
	t := time.NewTicker(max(p.cfg.Interval, time.Millisecond))
	defer t.Stop()
	for {
		if _, err := p.Prune(ctx); err != nil && ctx.Err() == nil {
			if ok, suppressed := p.limit.Allow("prune"); ok {
				p.log.Warn("outbox prune failed; retrying next interval", "err", err, "suppressed", suppressed)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Prune runs once: it deletes the retry queue's dispatched rows older than
// the retention and, on a store with segments, creates the segments the
// next records need and drops or truncates those retention lets go. It
// returns how many retry-queue rows and segments it removed (also when it
// stopped on an error).
func (p *Pruner) Prune(ctx context.Context) (int64, error) {
	var segErr error
	var segs int
	if p.segs != nil {
		segs, segErr = p.segs.KeepSegments(ctx, p.cfg.SegmentRecords, p.cfg.Retention, p.cfg.ArchiveLockTimeout)
		if segs > 0 {
			p.log.Info("removed outbox segments past retention", "segments", segs)
		}
	}
	res, err := p.admin.Purge(ctx, PurgeRequest{
		State: StateDispatched, OlderThan: p.cfg.Retention, BatchSize: p.cfg.BatchSize,
	})
	p.pruned.Add(float64(res.Deleted))
	if res.Deleted > 0 {
		p.log.Info("pruned dispatched outbox records", "deleted", res.Deleted, "batches", res.Batches,
			"dispatched_before", res.Cutoff)
	}
	return res.Deleted + int64(segs), errors.Join(segErr, err)
}
