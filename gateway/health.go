package gateway

import (
	"context"
	"net/http"
	"time"
)

// readyCheckTimeout bounds each readiness check.
const readyCheckTimeout = 2 * time.Second

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyAnswer is the body of /readyz: the status and each check's result
// ("ok" or the error).
type readyAnswer struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// handleReadyz runs every check concurrently; 200 only when all pass and
// the server is not shutting down.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyCheckTimeout)
	defer cancel()
	ans := s.readiness(ctx)
	status := http.StatusOK
	if ans.Status != "ready" {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, ans)
}
