package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func runFeed(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st := newCommandSettings("feed", stderr)
	var (
		store  storeSettings
		broker brokerSettings
		worker workerSettings
		logs   logSettings
		listen string
	)
	store.register(st)
	broker.register(st)
	worker.register(st)
	worker.registerTrigger(st)
	logs.register(st)
	st.String(&listen, "listen", "127.0.0.1:8081", "address for /healthz, /readyz and /metrics of the Worker; empty = none")
	log, err := st.parseLogged(args, &logs, stderr)
	if err != nil {
		return err
	}
	if !store.isPostgres() {
		lock, err := lockDataDir(store.DataDir)
		if err != nil {
			return err
		}
		defer lock.release()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reg := newRegistry()
	if !broker.usesRedis() {
		log.Warn("herald feed without --redis-url publishes to an in-memory broker that no gateway process can see; use --redis-url to reach the gateways")
	}
	s, err := openStore(ctx, store, worker.NotifyTrigger, log)
	if err != nil {
		return err
	}
	defer s.Close()
	b, brokerName, err := broker.open(log, reg, "")
	if err != nil {
		return err
	}
	defer b.Stop()
	wcfg, err := worker.config(log, reg)
	if err != nil {
		return err
	}
	ws, err := startWorkers(ctx, s, b, wcfg, worker.Handlers.entries, log, reg)
	if err != nil {
		return err
	}
	defer ws.stop()
	w := ws.realtime
	pruner, err := worker.startPruner(ctx, s, log, reg)
	if err != nil {
		return err
	}
	defer pruner.Stop()

	addr := "(none)"
	if listen != "" {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return fmt.Errorf("config: --listen %q: %w", listen, err)
		}
		addr = ln.Addr().String()
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, r *http.Request) {
			ready := w.Readiness()
			if ready == nil {
				ready = b.Ping(r.Context())
			}
			if ready != nil {
				http.Error(rw, "not ready: "+ready.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(rw, "ready")
		})
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer func() {
			sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
			defer c()
			_ = hs.Shutdown(sctx)
		}()
	}
	fmt.Fprintf(stdout, "Herald feed %s running as %s (broker: %s, ops: %s)\n", version, w.Owner(), brokerName, addr)
	log.Info("herald feed running", "owner", w.Owner(), "broker", brokerName, "ops", addr)
	<-ctx.Done()
	log.Info("herald feed stopping")
	return nil
}
