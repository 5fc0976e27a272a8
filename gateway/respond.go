package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/heraldgw/herald/gateway/internal/session"
)

// errorBody is the JSON body of every refused request:
// {"error":{"code":"...","message":"..."}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Protocols lists the WebSocket subprotocols the server speaks, in a
	// handshake refused for offering none of them.
	Protocols []string `json:"protocols,omitempty"`
}

// writeError answers with status and the JSON error body.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, errorBody{Error: errorDetail{Code: code, Message: message}})
}

// refuse answers a refused stream for r with message.
func refuse(w http.ResponseWriter, r session.Reason, message string) {
	if message == "" {
		message = r.Message
	}
	writeError(w, r.Status, r.Code, message)
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"server_error","message":"cannot encode the answer"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// trunc keeps echoed client input short.
func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
