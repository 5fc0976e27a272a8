package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/outboxfeed/webhookhandler"

	"github.com/prometheus/client_golang/prometheus"
)

// workers are the outbox Workers of one process: the realtime handler's
// (its readiness is the process's) and one per other configured handler.
type workers struct {
	realtime *outboxfeed.Worker
	others   []*outboxfeed.Worker
	hooks    []*webhookhandler.Handler
}

// startWorkers registers the configured handlers in the store and starts
// a Worker for each, the realtime handler's publishing through pub. A
// handler the store knows that the config no longer has is logged as
// orphaned: it keeps its positions until `herald handlers drop`.
func startWorkers(ctx context.Context, store outboxfeed.Store, pub outboxfeed.Publisher, base outboxfeed.WorkerConfig,
	entries []handlerEntry, log *slog.Logger, reg prometheus.Registerer) (_ *workers, err error) {
	ws := &workers{}
	defer func() {
		if err != nil {
			ws.stop()
		}
	}()
	rtCfg := base
	// The realtime Worker goes first: while it has a backlog, the webhook
	// handlers' Workers wait between batches (docs/handlers.md).
	prec := &outboxfeed.Precedence{}
	rtCfg.Leads = prec
	var hooks []handlerEntry
	for _, e := range entries {
		if e.Type == "realtime" {
			rtCfg.Routes = e.Routes
			continue
		}
		hooks = append(hooks, e)
	}
	if len(hooks) > 0 && !rtCfg.Routes.All() {
		rtCfg.RoutedElsewhere = func(r *outboxfeed.Record) bool {
			for _, h := range hooks {
				if h.Routes.Match(r) {
					return true
				}
			}
			return false
		}
	} else if !rtCfg.Routes.All() {
		rtCfg.RoutedElsewhere = func(*outboxfeed.Record) bool { return false }
	}
	hs, ok := store.(outboxfeed.HandlerStore)
	if !ok && len(hooks) > 0 {
		return nil, fmt.Errorf("config: handlers: the %T store keeps no positions per handler", store)
	}
	for _, e := range hooks {
		if _, err := hs.RegisterHandler(ctx, outboxfeed.HandlerSpec{Name: e.Name, Type: e.Type, Start: e.Start}); err != nil {
			return nil, err
		}
		h, err := webhookhandler.New(e.Webhook, reg)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		ws.hooks = append(ws.hooks, h)
		cfg := h.WorkerConfig(base)
		cfg.Routes = e.Routes
		cfg.YieldsTo = prec
		w, err := outboxfeed.NewDeliveryWorker(hs.ForHandler(e.Name), h, cfg)
		if err != nil {
			return nil, fmt.Errorf("config: handler %s: %w", e.Name, err)
		}
		if err := w.Start(ctx); err != nil {
			return nil, err
		}
		ws.others = append(ws.others, w)
		log.Info("handler started", "handler", e.Name, "type", e.Type, "endpoint", h.String())
	}
	if hs != nil {
		known, err := hs.Handlers(ctx)
		if err != nil {
			return nil, err
		}
		configured := map[string]bool{outboxfeed.RealtimeHandler: true}
		for _, e := range hooks {
			configured[e.Name] = true
		}
		for _, k := range known {
			if !configured[k.Name] {
				log.Warn("handler orphaned: in the store but not in the config; its records wait (herald handlers drop "+k.Name+" deletes it)",
					"handler", k.Name, "type", k.Type)
			}
		}
	}
	rt, err := outboxfeed.NewWorker(store, pub, rtCfg)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := rt.Start(ctx); err != nil {
		return nil, err
	}
	ws.realtime = rt
	return ws, nil
}

// stop stops every Worker and closes the webhook endpoints.
func (ws *workers) stop() {
	if ws.realtime != nil {
		ws.realtime.Stop()
	}
	for _, w := range ws.others {
		w.Stop()
	}
	for _, h := range ws.hooks {
		h.Close()
	}
}

// errNoHandlerStore is returned by the handlers command for a store
// without handlers.
var errNoHandlerStore = errors.New("the store keeps no positions per handler")
