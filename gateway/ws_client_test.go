package gateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/gateway/internal/wstest"
	"github.com/heraldgw/herald/internal/testenv"
)

// dialWS opens /v1/ws and starts reading; it fails the test if the
// handshake fails.
func (e *testEnv) dialWS(o wstest.DialOpts) *wstest.Client {
	e.t.Helper()
	c, resp, err := e.tryDialWS(o)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		e.t.Fatalf("dial /v1/ws: status %d: %v", status, err)
	}
	return c
}

func (e *testEnv) tryDialWS(o wstest.DialOpts) (*wstest.Client, *http.Response, error) {
	return wstest.Dial(e.t, "ws://"+e.srv.Addr(), o, e.client)
}

// wsToken mints a connection token with subscribe and publish grants.
func (e *testEnv) wsToken(sub string, subscribe, publish []string) string {
	e.t.Helper()
	return e.mint(sub, time.Now().Add(time.Hour), subscribe, publish)
}

func (e *testEnv) mint(sub string, exp time.Time, subscribe, publish []string) string {
	e.t.Helper()
	tok, err := mintClaims(sub, "acme", exp, subscribe, publish, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// connected dials and connects with a token granting subscribe.
func (e *testEnv) connected(subscribe ...string) *wstest.Client {
	e.t.Helper()
	c := e.dialWS(wstest.DialOpts{})
	c.Connect(e.wsToken("u1", subscribe, nil))
	return c
}

// eventually polls cond every few milliseconds until it holds, failing
// the test after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}

// mintClaims mints an HS256 token with testSecret.
func mintClaims(sub, tenant string, exp time.Time, subscribe, publish []string, channel string) (string, error) {
	return auth.MintHS256(testSecret, auth.Claims{
		Subject: sub, Tenant: tenant, Subscribe: subscribe, Publish: publish, Channel: channel, ExpiresAt: exp,
	})
}
