package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/internal/hookrecv"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/pgstore"
	"github.com/heraldgw/herald/outboxfeed/webhook"
	"github.com/heraldgw/herald/outboxfeed/webhookhandler"
)

// hookName is the webhook handler of -webhook.
const hookName = "bench-hook"

// hookApp is the application_name of the webhook handler's own pool
// (-webhook-pool own): its backends' CPU is then told apart from the
// realtime Worker's.
const hookApp = "herald-hook"

// hookSide is a webhook handler draining beside the realtime Worker: a
// Worker of its own over the same store, delivering to the receiver
// process (-webhook).
type hookSide struct {
	store   *pgstore.Store
	own     *pgstore.Store // the handler's own pool (-webhook-pool own), else nil
	hook    *webhookhandler.Handler
	worker  *outboxfeed.Worker
	reg     *prometheus.Registry
	counter *hookrecv.Counter
	prec    *outboxfeed.Precedence // the realtime Worker leads it (nil: -webhook-yield=false)
}

// openBeside opens a phase's store as openReset does and, with recv,
// registers the webhook handler beside the realtime Worker on it
// (registerHook, timing its store calls on tl when not nil); without recv
// the handler is nil.
func openBeside(ctx context.Context, db *benchDB, cfg config, recv *hookrecv.Receiver, notifyTrigger bool, retained int, trace bool, tl *timeline) (*pgstore.Store, *hookSide, error) {
	store, err := db.openReset(ctx, notifyTrigger, retained, cfg.Channels)
	if err != nil || recv == nil {
		return store, nil, err
	}
	hook, err := registerHook(ctx, store, cfg, recv, notifyTrigger, trace, tl)
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return store, hook, nil
}

// registerHook registers the webhook handler on store (StartNew: the
// rows already there, retained ones included, are not its); its Worker
// starts with start. Records staged from now on are its as well as
// realtime's.
func registerHook(ctx context.Context, store *pgstore.Store, cfg config, recv *hookrecv.Receiver, notify, trace bool, tl *timeline) (*hookSide, error) {
	if _, err := store.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: hookName, Type: "webhook", Start: outboxfeed.StartNew}); err != nil {
		return nil, err
	}
	workerStore := store
	var own *pgstore.Store
	if cfg.WebhookPool != "shared" {
		// own-poll: no LISTEN of its own either; the Worker polls.
		var err error
		url := store.Pool().Config().ConnString()
		if strings.Contains(url, "?") {
			url += "&application_name=" + hookApp
		} else {
			url += "?application_name=" + hookApp
		}
		own, err = pgstore.Open(ctx, pgstore.Config{URL: url, DisableNotifyTrigger: !notify || cfg.WebhookPool == "own-poll"})
		if err != nil {
			return nil, errors.Join(err, store.DropHandler(ctx, hookName))
		}
		workerStore = own
	}
	closeOwn := func() {
		if own != nil {
			own.Close()
		}
	}
	var k [32]byte
	_, _ = rand.Read(k[:])
	h, err := webhookhandler.New(webhook.Config{
		Name: hookName, URL: recv.URL, AllowPrivateNetwork: true, MaxInFlight: cfg.WebhookMaxInFlight, ClaimDelay: cfg.WebhookClaimDelay,
		BatchSize: cfg.BatchSize,
		Secret:    webhook.Secret(webhook.SecretPrefix + base64.StdEncoding.EncodeToString(k[:])),
	}, nil)
	if err != nil {
		closeOwn()
		return nil, errors.Join(err, store.DropHandler(ctx, hookName))
	}
	s := &hookSide{store: store, own: own, hook: h, reg: prometheus.NewRegistry(), counter: hookrecv.NewCounter(h)}
	if cfg.WebhookNull {
		s.counter = hookrecv.NewCounter(nullDeliverer{})
	}
	if cfg.WebhookYield {
		s.prec = &outboxfeed.Precedence{}
	}
	var hs outboxfeed.Store = workerStore.ForHandler(hookName)
	var d outboxfeed.Deliverer = s.counter
	if trace {
		hs = newStageStore(hs.(*pgstore.Store), "webhook", tl)
		d = busyDeliverer{next: s.counter}
	}
	s.worker, err = outboxfeed.NewDeliveryWorker(hs, d,
		h.WorkerConfig(outboxfeed.WorkerConfig{
			Lanes: cfg.Lanes, PollInterval: cfg.PollInterval, ActivePollInterval: cfg.ActivePollInterval, CycleInterval: cfg.CycleInterval,
			Registerer: s.reg, YieldsTo: s.prec, StatsInterval: cfg.WebhookStatsInterval,
		}))
	if err != nil {
		h.Close()
		closeOwn()
		return nil, errors.Join(err, store.DropHandler(ctx, hookName))
	}
	return s, nil
}

// precedence is what the realtime Worker leads (nil: nothing, or no
// handler beside it).
func (s *hookSide) precedence() *outboxfeed.Precedence {
	if s == nil {
		return nil
	}
	return s.prec
}

// start starts the handler's Worker.
func (s *hookSide) start(ctx context.Context) error { return s.worker.Start(ctx) }

// done reports whether the handler delivered n distinct records and
// counted as many completed (its metrics are read only once n were
// delivered: gathering costs CPU).
func (s *hookSide) done(n int64) (bool, error) {
	if s == nil {
		return true, nil
	}
	if s.counter.Distinct() < n {
		return false, nil
	}
	c, err := (&pipeline{reg: s.reg}).completed()
	return c >= n, err
}

// claims is how many claims the handler's Worker made, with records and
// empty (none without a handler).
func (s *hookSide) claims() (batch, empty int64, err error) {
	if s == nil {
		return 0, 0, nil
	}
	return (&pipeline{reg: s.reg}).claims()
}

// stop, deferred by a phase whose error is *err, stops the Worker (nil:
// nothing), checks what the handler delivered with check unless the
// phase failed (its records are checked only once it delivered them),
// drops the handler, and joins what went wrong to *err.
func (s *hookSide) stop(ctx context.Context, err *error, check func(context.Context) error) {
	if s == nil {
		return
	}
	s.worker.Stop()
	s.hook.Close()
	if s.own != nil {
		s.own.Close()
	}
	if *err == nil {
		*err = check(ctx)
	}
	*err = errors.Join(*err, s.store.DropHandler(context.WithoutCancel(ctx), hookName))
}

// checkRecords checks that the handler has exactly records records, all
// dispatched.
func (s *hookSide) checkRecords(ctx context.Context, records int) error {
	return checkDispatched(ctx, s.store.Pool(), hookName, "webhook handler", records)
}

// checkIDs checks that the records ids (none: no check) are dispatched
// for the handler.
func (s *hookSide) checkIDs(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	var dispatched int
	var states string
	err := s.store.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'dispatched'), coalesce(string_agg(DISTINCT state, ','), '')
		FROM herald.outbox_records WHERE handler = $1 AND id = ANY($2::uuid[])`, hookName, ids).Scan(&dispatched, &states)
	if err == nil && dispatched != len(ids) {
		err = fmt.Errorf("outboxbench: webhook handler: %d of the %d committed records dispatched (states %s)", dispatched, len(ids), states)
	}
	return err
}

// besideText names the variant in progress lines and the report.
func besideText(beside bool) string {
	if beside {
		return "with a webhook handler beside"
	}
	return "alone"
}

// hookVariants are the runs of a phase: alone only, or with -webhook
// alone, beside, beside, alone (ABBA).
func hookVariants(cfg config) []bool {
	if !cfg.Webhook {
		return []bool{false}
	}
	return []bool{false, true, true, false}
}

// eachHookVariant runs measure once per hookVariants, in order, with recv
// when the run is beside the webhook handler (nil when alone), and
// returns the results; the first failure ends it.
func eachHookVariant[R any](ctx context.Context, db *benchDB, cfg config, recv *hookrecv.Receiver, progress io.Writer,
	measure func(context.Context, *benchDB, config, *hookrecv.Receiver, io.Writer) (R, error)) ([]R, error) {
	var out []R
	for _, beside := range hookVariants(cfg) {
		var r *hookrecv.Receiver
		if beside {
			r = recv
		}
		res, err := measure(ctx, db, cfg, r, progress)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}
