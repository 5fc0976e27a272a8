package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/internal/hookrecv"
	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/hostinfo"
	"github.com/heraldgw/herald/loadtest/internal/scratchdb"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/pgstore"
	"github.com/heraldgw/herald/outboxfeed/webhook"
	"github.com/heraldgw/herald/outboxfeed/webhookhandler"
)

// handlerName is the benchmark's webhook handler.
const handlerName = "bench-hook"

// sample is one variant's run in one round.
type sample struct {
	Variant string
	Round   int
	Records int
	Elapsed time.Duration
	// Self is this process's CPU time, Postgres the bench database's
	// backends' (worker only), Receiver the receiver process's.
	Self, Postgres, Receiver time.Duration
	// Repeats is how many records the Worker delivered more than once
	// (at least once: a record whose completion was not written in time
	// is delivered again).
	Repeats int
	// InFlight is how many deliveries the Worker had in flight on
	// average (worker only).
	InFlight float64
}

func (s sample) rate() float64 { return float64(s.Records) / s.Elapsed.Seconds() }

// bench is what the variants share.
type bench struct {
	cfg   config
	store *pgstore.Store
	recv  *hookrecv.Receiver
	hook  *webhookhandler.Handler
	msgs  []webhook.Message // what endpoint and floor send
	sent  int64             // requests the receiver should have answered
}

// run creates the database and the receiver, runs the rounds, prints the
// report to out (progress to progress) and drops the database.
func run(ctx context.Context, cfg config, out, progress io.Writer) (err error) {
	db, err := scratchdb.Create(ctx, cfg.DatabaseURL, "herald_whbench_")
	if err != nil {
		return fmt.Errorf("webhookbench: %w", err)
	}
	defer func() { err = errors.Join(err, db.Drop()) }()
	store, err := pgstore.Open(ctx, pgstore.Config{URL: db.URL})
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	if _, err := store.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: handlerName, Type: "webhook", Start: outboxfeed.StartNew}); err != nil {
		return err
	}
	server, err := benchkit.ServerInfo(ctx, store.Pool())
	if err != nil {
		return err
	}
	recv, err := hookrecv.Start()
	if err != nil {
		return err
	}
	b := &bench{cfg: cfg, store: store, recv: recv, msgs: messages(cfg.Records, cfg.Channels)}
	defer func() {
		answered, rerr := recv.Stop()
		if err == nil && rerr == nil && answered != b.sent {
			rerr = fmt.Errorf("webhookbench: the receiver answered %d requests, want %d", answered, b.sent)
		}
		err = errors.Join(err, rerr)
	}()
	if b.hook, err = webhookhandler.New(webhook.Config{
		Name: handlerName, URL: recv.URL, Secret: newSecret(), MaxInFlight: cfg.MaxInFlight, AllowPrivateNetwork: true,
		BatchSize: cfg.BatchSize,
	}, nil); err != nil {
		return err
	}
	defer b.hook.Close()
	fmt.Fprintf(progress, "webhookbench: database %s, receiver pid %d at %s\n", db.Name, recv.Pid, recv.URL)

	// Unmeasured: the endpoint's and the floor's connections open, the
	// receiver's and this process's code and heap warm up.
	for _, v := range []string{"endpoint", "floor"} {
		if _, err := b.runVariant(ctx, v, -1, min(b.cfg.Records, warmUp)); err != nil {
			return err
		}
	}
	loadStart := hostinfo.LoadAvg()
	var samples []sample
	order := cfg.variants()
	for r := range cfg.Rounds {
		for _, v := range order {
			s, err := b.runVariant(ctx, v, r, b.cfg.Records)
			if err != nil {
				return err
			}
			fmt.Fprintf(progress, "round %d %-8s %8.0f records/s, CPU per record: Herald %.1f µs, PostgreSQL %.1f µs, receiver %.1f µs; %d delivered again; %.1f in flight on average\n",
				r+1, v, s.rate(), benchkit.PerRecordMicros(s.Self, s.Records), benchkit.PerRecordMicros(s.Postgres, s.Records),
				benchkit.PerRecordMicros(s.Receiver, s.Records), s.Repeats, s.InFlight)
			samples = append(samples, s)
		}
		slices.Reverse(order)
	}
	printReport(out, cfg, server, loadStart, samples)
	return nil
}

// warmUp is how many requests the unmeasured warm-up sends per variant.
const warmUp = 5_000

// runVariant runs variant v once, with the first n messages.
func (b *bench) runVariant(ctx context.Context, v string, round, n int) (sample, error) {
	s := sample{Variant: v, Round: round, Records: n}
	var err error
	switch v {
	case "worker":
		err = b.runWorker(ctx, &s)
	case "endpoint":
		ctx := context.Background()
		err = b.runConcurrent(&s, func(i int) error {
			r := b.hook.Deliver(ctx, outboxRecord(&b.msgs[i]))
			if r != nil {
				return fmt.Errorf("webhookbench: endpoint: %w", r)
			}
			return nil
		})
	case "floor":
		err = b.runFloor(&s)
	}
	b.sent += int64(s.Records + s.Repeats)
	return s, err
}

// measure times fn and takes this process's, the receiver's and (with a
// pool) the bench database's backends' CPU time around it.
func (b *bench) measure(ctx context.Context, s *sample, pool *pgxpool.Pool, fn func() error) error {
	var pg0 benchkit.Backends
	if pool != nil {
		pg0 = benchkit.ReadBackends(ctx, pool)
	}
	recv0, err := benchkit.ProcCPU(b.recv.Pid)
	if err != nil {
		return fmt.Errorf("webhookbench: receiver: %w", err)
	}
	self0, t0 := benchkit.SelfCPU(), time.Now()
	err = fn()
	s.Elapsed, s.Self = time.Since(t0), benchkit.SelfCPU()-self0
	recv1, rerr := benchkit.ProcCPU(b.recv.Pid)
	s.Receiver = recv1 - recv0
	if pool != nil {
		s.Postgres = benchkit.ReadBackends(ctx, pool).Since(pg0)
	}
	return errors.Join(err, rerr)
}

// runConcurrent calls send(i) for i in [0, Records) from MaxInFlight
// goroutines.
func (b *bench) runConcurrent(s *sample, send func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, b.cfg.MaxInFlight)
	return b.measure(context.Background(), s, nil, func() error {
		for w := range b.cfg.MaxInFlight {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < s.Records; i = int(next.Add(1) - 1) {
					if errs[w] = send(i); errs[w] != nil {
						return
					}
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	})
}

// runFloor POSTs the messages' bodies with a bare net/http client.
func (b *bench) runFloor(s *sample) error {
	bodies := make([][]byte, len(b.msgs))
	for i := range b.msgs {
		var err error
		if bodies[i], err = webhook.AppendBody(nil, &b.msgs[i]); err != nil {
			return err
		}
	}
	floor := hookrecv.NewFloor(b.recv.URL, b.cfg.MaxInFlight)
	defer floor.Close()
	return b.runConcurrent(s, func(i int) error {
		if err := floor.Post(bodies[i]); err != nil {
			return fmt.Errorf("webhookbench: floor: %w", err)
		}
		return nil
	})
}

// runWorker stages the records with no Worker running, then starts the
// handler's Worker and times its start → every record completed.
func (b *bench) runWorker(ctx context.Context, s *sample) error {
	pool := b.store.Pool()
	if err := stage(ctx, pool, b.msgs[:s.Records]); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `ANALYZE herald.outbox`); err != nil {
		return fmt.Errorf("webhookbench: analyze: %w", err)
	}
	reg := prometheus.NewRegistry()
	d := hookrecv.NewCounter(b.hook)
	w, err := outboxfeed.NewDeliveryWorker(b.store.ForHandler(handlerName), d, b.hook.WorkerConfig(outboxfeed.WorkerConfig{
		Lanes: b.cfg.Lanes, Registerer: reg,
	}))
	if err != nil {
		return err
	}
	started := false
	err = b.measure(ctx, s, pool, func() error {
		if err := w.Start(ctx); err != nil {
			return err
		}
		started = true
		// Gathering the Worker's metrics costs CPU: only once every
		// record was delivered is the completion count read.
		return benchkit.PollUntil(ctx, 5*time.Minute, time.Millisecond, nil, func() (bool, error) {
			if d.Distinct() < int64(s.Records) {
				return false, nil
			}
			n, err := completed(reg)
			return n >= int64(s.Records), err
		})
	})
	if started {
		w.Stop()
	}
	s.Repeats = int(d.Successes() - d.Distinct())
	s.InFlight = float64(d.InFlight()) / float64(s.Elapsed)
	return err
}

// completed is the Worker's count of delivered records
// (herald_outbox_outcomes_total{result="success"}).
func completed(reg *prometheus.Registry) (int64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("webhookbench: gather worker metrics: %w", err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "herald_outbox_outcomes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == outboxfeed.OutcomeSuccess {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int64(n), nil
}

// stage inserts msgs as outbox records (COPY, in one transaction).
func stage(ctx context.Context, pool *pgxpool.Pool, msgs []webhook.Message) error {
	cols := []string{"tenant_id", "channel", "kind", "type", "schema_version", "payload"}
	rows := make([][]any, len(msgs))
	for i, m := range msgs {
		rows[i] = []any{m.Tenant, m.Channel, m.Kind, m.Type, m.SchemaVersion, m.Data}
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"herald", "outbox"}, cols, pgx.CopyFromRows(rows))
		return err
	})
	if err != nil {
		return fmt.Errorf("webhookbench: stage: %w", err)
	}
	return nil
}

// messages are n distinct records over channels, of a realistic size (a
// ~170-byte payload, as outboxfeed/webhook's BenchmarkDeliver).
func messages(n, channels int) []webhook.Message {
	ms := make([]webhook.Message, n)
	now := time.Now().UTC()
	for i := range ms {
		ms[i] = webhook.Message{
			ID: uuid.NewString(), Tenant: "acme", Channel: fmt.Sprintf("billing/customers/%d", i%channels),
			Kind: "integration_event", Type: "invoice.paid", SchemaVersion: 2, Time: now,
			Data: json.RawMessage(fmt.Sprintf(`{"invoice":"in_%06d","customer":"cus_%06d","amount":%d,"currency":"EUR",`+
				`"lines":[{"sku":"plan-pro","quantity":1,"unit_amount":%d}],"paid_at":"2025-03-01T10:15:30Z"}`, i, i%channels, 1000+i, 1000+i)),
		}
	}
	return ms
}

// outboxRecord is m as the record the Worker would hand the handler.
func outboxRecord(m *webhook.Message) *outboxfeed.Record {
	return &outboxfeed.Record{ID: m.ID, TenantID: m.Tenant, Channel: m.Channel, Kind: m.Kind, Type: m.Type,
		SchemaVersion: m.SchemaVersion, OccurredAt: m.Time, Payload: m.Data}
}

// newSecret is a random signing secret.
func newSecret() webhook.Secret {
	var k [32]byte
	_, _ = rand.Read(k[:])
	return webhook.Secret(webhook.SecretPrefix + base64.StdEncoding.EncodeToString(k[:]))
}
