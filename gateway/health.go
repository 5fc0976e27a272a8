package gateway

import (
	"context"
	"net/http"
	"sync"
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
	results := make([]error, len(s.deps.ReadyChecks))
	var wg sync.WaitGroup
	for i, c := range s.deps.ReadyChecks {
		wg.Go(func() { results[i] = c.Check(ctx) })
	}
	wg.Wait()

	ans := readyAnswer{Status: "ready", Checks: make(map[string]string, len(results)+1)}
	for i, c := range s.deps.ReadyChecks {
		if results[i] != nil {
			ans.Status = "not_ready"
			ans.Checks[c.Name] = "error: " + results[i].Error()
		} else {
			ans.Checks[c.Name] = "ok"
		}
	}
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		ans.Status = "not_ready"
		ans.Checks["shutdown"] = "error: the server is shutting down"
	}
	status := http.StatusOK
	if ans.Status != "ready" {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, ans)
}
