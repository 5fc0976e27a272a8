package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// validateOrigins checks Config.AllowedOrigins patterns.
func validateOrigins(patterns []string) error {
	for i, p := range patterns {
		if p == "" {
			return fmt.Errorf("AllowedOrigins[%d] is empty", i)
		}
		if _, err := path.Match(strings.ToLower(p), ""); err != nil {
			return fmt.Errorf("AllowedOrigins[%d] %q is not a valid pattern: %v", i, p, err)
		}
	}
	return nil
}

// originAllowed reports whether the request's Origin may open a WebSocket:
// no Origin (not a browser), the request's own host, or a match of
// Config.AllowedOrigins. Browsers send cookies with cross-site WebSocket
// handshakes, so without this check any site could ride a user's session.
func (s *Server) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	if u.Host != "" && strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, p := range s.cfg.AllowedOrigins {
		if p == "*" {
			return true
		}
		if u.Host == "" {
			continue
		}
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return true
		}
	}
	return false
}

// offersToken reports whether the comma-separated header values of name
// hold token (case-insensitively).
func offersToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
