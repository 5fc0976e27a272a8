package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// corsAllowHeaders are the request headers a cross-origin page may send to
// /v1/sse and /v1/tickets: the bearer token, a JSON body, and the resume
// position of a fetch-based event stream.
const corsAllowHeaders = "Authorization, Content-Type, Last-Event-ID"

// corsMaxAge is how long, in seconds, a browser may cache a preflight.
const corsMaxAge = "600"

// cors lets the pages of Config.AllowedOrigins call next (an endpoint
// answering allowed methods) from another origin, cookies and the
// Authorization header included:
//
//   - A preflight (OPTIONS with Access-Control-Request-Method) from an
//     allowed origin is answered 204 with what may be sent; from any
//     other origin, 403.
//   - Other requests go to next; when they carry an allowed Origin other
//     than the server's own, the response names that origin (never "*",
//     which browsers refuse with credentials). A request from an origin
//     not allowed is served without those headers, so the browser keeps
//     the response from the page: neither endpoint changes anything a
//     page could abuse without reading the answer (a ticket nobody reads
//     expires unused).
func (s *Server) cors(next http.Handler, allowed ...string) http.Handler {
	methods := strings.Join(allowed, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		h := w.Header()
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Add("Vary", "Origin")
			if !s.crossOrigin(r) {
				writeError(w, http.StatusForbidden, "forbidden", fmt.Sprintf(
					"origin %q may not call %s from a browser page (AllowedOrigins)", trunc(origin, 100), r.URL.Path))
				return
			}
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Allow-Credentials", "true")
			h.Set("Access-Control-Allow-Methods", methods)
			h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
			h.Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if origin != "" {
			h.Add("Vary", "Origin")
			if s.crossOrigin(r) {
				h.Set("Access-Control-Allow-Origin", origin)
				h.Set("Access-Control-Allow-Credentials", "true")
			}
		}
		next.ServeHTTP(w, r)
	})
}

// crossOrigin reports whether r carries an Origin other than the server's
// own host that Config.AllowedOrigins lets in.
func (s *Server) crossOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || strings.EqualFold(u.Host, r.Host) {
		return false
	}
	return s.originAllowed(r)
}
