package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
)

// The poll scenario's server: what an application without push serves,
// an HTTP endpoint that returns a channel's updates after a cursor,
// straight from its own table in PostgreSQL. connbench runs it as a child
// process of its own (itself, with pollServerEnv set), so its CPU and
// memory are measured apart from the clients', as Herald's are.

// pollServerEnv, when set, makes connbench the poll server:
// "<listen address> <database URL> <table>".
const pollServerEnv = "CONNBENCH_POLL_SERVER"

// pollPoolConns is the poll server's PostgreSQL pool: a typical
// application's.
const pollPoolConns = 8

// pollPage bounds the updates one poll returns.
const pollPage = 100

// pollTableDDL creates the table the poll scenario's updates are
// committed to: one row per update, read by channel after an id.
func pollTableDDL(table string) string {
	return fmt.Sprintf(`CREATE TABLE %[1]s (
	id bigserial PRIMARY KEY,
	channel int NOT NULL,
	payload jsonb NOT NULL
);
CREATE INDEX %[1]s_channel_id ON %[1]s (channel, id)`, table)
}

// servePoll runs the poll server described by spec until SIGTERM or
// SIGINT, and returns the exit code.
func servePoll(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "connbench poll server: %s=%q: want \"<addr> <database URL> <table>\"\n", pollServerEnv, spec)
		return 2
	}
	addr, dbURL, table := f[0], f[1], f[2]
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := benchkit.OpenPool(ctx, dbURL, pollPoolConns, "connbench-poll-server")
	if err != nil {
		fmt.Fprintf(os.Stderr, "connbench poll server: %v\n", err)
		return 1
	}
	defer pool.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "connbench poll server: %v\n", err)
		return 1
	}
	query := "SELECT id, payload::text FROM " + table + " WHERE channel = $1 AND id > $2 ORDER BY id LIMIT " + strconv.Itoa(pollPage)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/updates", func(w http.ResponseWriter, r *http.Request) { pollUpdates(w, r, pool, query) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(os.Stderr, "connbench poll server: %v\n", err)
		return 1
	}
	return 0
}

// pollUpdates answers GET /v1/updates?channel=C&after=ID: the channel's
// updates after id ID, oldest first, at most pollPage, as
// {"updates":[{"id":…,"data":…},…]}; the client asks again after the
// last id it got.
func pollUpdates(w http.ResponseWriter, r *http.Request, pool *pgxpool.Pool, query string) {
	q := r.URL.Query()
	channel, err1 := strconv.Atoi(q.Get("channel"))
	after, err2 := strconv.ParseInt(q.Get("after"), 10, 64)
	if err1 != nil || err2 != nil {
		http.Error(w, "want ?channel=<int>&after=<id>", http.StatusBadRequest)
		return
	}
	rows, err := pool.Query(r.Context(), query, channel, after)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer rows.Close()
	b := make([]byte, 0, 256)
	b = append(b, `{"updates":[`...)
	n := 0
	for rows.Next() {
		var id int64
		var data string
		if err := rows.Scan(&id, &data); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if n > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = strconv.AppendInt(b, id, 10)
		b = append(b, `,"data":`...)
		b = append(b, data...)
		b = append(b, '}')
		n++
	}
	if err := rows.Err(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	b = append(b, "]}"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}
