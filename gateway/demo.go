package gateway

import (
	_ "embed"
	"net/http"
)

// demoPage is the demo at GET /: plain HTML and JavaScript, no external
// resources.
//
//go:embed demo/index.html
var demoPage []byte

// demoCSP keeps the demo page to itself: inline script and style, requests
// to this origin only.
const demoCSP = "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'"

func handleDemo(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Security-Policy", demoCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(demoPage)
	}
}
