package gateway

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// Token sources, for logs and errors (never the token itself).
const (
	sourceHeader = "authorization header"
	sourceCookie = "cookie"
	sourceQuery  = "access_token query parameter"
)

var errAccessTokenQueryOff = errors.New("the access_token query parameter is disabled on this server; send Authorization: Bearer or the cookie")

// credentials finds the request's token: the Authorization header first,
// then the cookie, then (when allowed) the access_token query parameter. An
// empty token with a nil error means none was presented.
func (s *Server) credentials(r *http.Request, query url.Values) (token, source string, err error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			return "", sourceHeader, errors.New("the Authorization header must be \"Bearer <token>\"")
		}
		return strings.TrimSpace(tok), sourceHeader, nil
	}
	if c, cerr := r.Cookie(s.cfg.CookieName); cerr == nil && c.Value != "" {
		return c.Value, sourceCookie, nil
	}
	if tok := query.Get("access_token"); tok != "" {
		if s.cfg.DisableAccessTokenQuery {
			return "", sourceQuery, errAccessTokenQueryOff
		}
		return tok, sourceQuery, nil
	}
	return "", "", nil
}
