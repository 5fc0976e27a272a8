package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/gateway/internal/wstest"
)

// signRaw signs header and claims as given with HS256 and testSecret, so a
// test can send what no well-behaved minter would.
func signRaw(t *testing.T, header, claims map[string]any) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	input := enc(header) + "." + enc(claims)
	mac := hmac.New(sha256.New, testSecret)
	mac.Write([]byte(input))
	return input + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// TestBadTokensRefusedOnBothTransports: tokens that verify by signature
// but must not authenticate — a JOSE header with crit (RFC 7515
// §4.1.11), exp or iat that is not a JSON number, a tenant that is not a
// valid name — are refused like any bad token: 401 unauthorized on SSE,
// error unauthorized and close 4501 at a WebSocket's connect.
func TestBadTokensRefusedOnBothTransports(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{ConnectAttemptsPerIP: -1}})
	hs := map[string]any{"alg": "HS256", "typ": "JWT"}
	claims := func(tenant string, exp any) map[string]any {
		return map[string]any{"sub": "u1", "exp": exp,
			"herald": map[string]any{"tenant": tenant, "subscribe": []string{"orders/*"}}}
	}
	exp := time.Now().Add(time.Hour).Unix()
	good := signRaw(t, hs, claims("acme", exp))
	cases := map[string]string{
		"crit":          signRaw(t, map[string]any{"alg": "HS256", "typ": "JWT", "crit": []string{"exp"}}, claims("acme", exp)),
		"exp string":    signRaw(t, hs, claims("acme", strconv.FormatInt(exp, 10))),
		"iat string":    signRaw(t, hs, func() map[string]any { c := claims("acme", exp); c["iat"] = "1700000000"; return c }()),
		"tenant dot":    signRaw(t, hs, claims("..", exp)),
		"tenant slash":  signRaw(t, hs, claims("acme/other", exp)),
		"tenant spaces": signRaw(t, hs, claims("ac me", exp)),
	}
	e.stream(good, "orders/1") // the same shape, well formed, is accepted
	c := e.dialWS(wstest.DialOpts{})
	c.Connect(good)
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			c := e.dialWS(wstest.DialOpts{})
			c.Fails(c.Request(ws.OpConnect, map[string]any{"token": tok}), ws.CodeUnauthorized)
			c.ClosedWith(session.ReasonUnauthorized.Code, session.CloseUnauthorized)
			e.refused(request{bearer: tok, query: q("channel", "orders/1")}, http.StatusUnauthorized, session.ReasonUnauthorized.Code)
		})
	}
}
