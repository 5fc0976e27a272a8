package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routes builds the gateway's handler.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/sse", s.cors(methods(s.limitAttempts(transportSSE, s.handleSSE), http.MethodGet), http.MethodGet))
	mux.Handle("/v1/ws", methods(s.limitAttempts(transportWS, s.handleWS), http.MethodGet))
	mux.Handle("/v1/tickets", s.cors(methods(s.limitAttempts("", s.handleTickets), http.MethodPost), http.MethodPost))
	mux.Handle("/healthz", methods(s.handleHealthz, http.MethodGet, http.MethodHead))
	mux.Handle("/readyz", methods(s.handleReadyz, http.MethodGet, http.MethodHead))
	mux.Handle("/metrics", methods(s.handleMetrics(), http.MethodGet, http.MethodHead))
	mux.Handle("/client/", methods(s.handleClientJS, http.MethodGet, http.MethodHead))
	mux.Handle("/{$}", methods(handleDemo, http.MethodGet, http.MethodHead))
	s.opsRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such path")
	})
	return s.countRequests(mux)
}

// methods answers 405 with a JSON body to any method but allowed.
func methods(h http.HandlerFunc, allowed ...string) http.Handler {
	allow := ""
	for i, m := range allowed {
		if i > 0 {
			allow += ", "
		}
		allow += m
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, m := range allowed {
			if r.Method == m {
				h(w, r)
				return
			}
		}
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use "+allow)
	})
}

func (s *Server) handleMetrics() http.HandlerFunc {
	if s.gatherer == nil {
		return func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotFound, "not_found", "metrics are not configured on this server")
		}
	}
	h := promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{ErrorLog: slogPrinter{s}})
	return h.ServeHTTP
}

// slogPrinter adapts the server's logger to promhttp's error log.
type slogPrinter struct{ s *Server }

// Println logs one promhttp error.
func (p slogPrinter) Println(v ...any) {
	p.s.log.Error("gateway: metrics exposition failed", "error", v)
}

// handleClientJS serves the client's modules (/client/herald.js, the
// whole client, and the modules it imports). The URLs carry no version,
// so caches revalidate every time (no-cache) and get 304 while the ETag,
// a hash of the file, matches.
func (s *Server) handleClientJS(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/client/")
	var b []byte
	err := fs.ErrNotExist
	if s.deps.ClientJS != nil && strings.HasSuffix(name, ".js") && fs.ValidPath(name) {
		b, err = fs.ReadFile(s.deps.ClientJS, name)
	}
	if err != nil {
		writeError(w, http.StatusNotFound, "not_found", "no such client module on this server")
		return
	}
	sum := sha256.Sum256(b)
	h := w.Header()
	h.Set("Content-Type", "text/javascript; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", `"`+hex.EncodeToString(sum[:12])+`"`)
	h.Set("X-Content-Type-Options", "nosniff")
	// Public code, fetched without credentials: a page of any origin may
	// import it as a module (module scripts are fetched with CORS). What
	// the page may then connect to is still governed by AllowedOrigins.
	h.Set("Access-Control-Allow-Origin", "*")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
}

// countRequests counts every request by route and status when the status
// is sent (so a stream counts when it starts).
func (s *Server) countRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, s: s, path: routeLabel(r.URL.Path)}
		next.ServeHTTP(rec, r)
		if !rec.counted {
			rec.count(http.StatusOK)
		}
	})
}

// statusRecorder counts the status of one response. It unwraps for
// http.ResponseController, so deadlines and flushes reach the connection.
type statusRecorder struct {
	http.ResponseWriter
	s       *Server
	path    string
	counted bool
}

func (r *statusRecorder) count(code int) {
	r.counted = true
	r.s.metrics.httpRequests.WithLabelValues(r.path, statusLabel(code)).Inc()
}

// WriteHeader counts the first final status and passes it on.
func (r *statusRecorder) WriteHeader(code int) {
	if !r.counted && (code >= 200 || code == http.StatusSwitchingProtocols) {
		r.count(code)
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write counts an implicit 200 and passes b on.
func (r *statusRecorder) Write(b []byte) (int, error) {
	if !r.counted {
		r.count(http.StatusOK)
	}
	return r.ResponseWriter.Write(b)
}

// FlushError flushes and reports failure (for http.ResponseController).
func (r *statusRecorder) FlushError() error {
	return http.NewResponseController(r.ResponseWriter).Flush()
}

// Flush lets handlers that assert http.Flusher (promhttp) flush.
func (r *statusRecorder) Flush() { _ = r.FlushError() }

// Unwrap returns the wrapped writer, for http.ResponseController.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
