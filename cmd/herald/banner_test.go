package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
)

// bannerOf renders the banner of a node with options o, as serve would.
func bannerOf(o serveOptions, devMode bool) string {
	if o.store.DataDir == "" {
		o.store.DataDir = defaultDataDir
	}
	o.feed = true
	var b strings.Builder
	banner(&b, "http://127.0.0.1:8080", "store", "broker", o, devMode)
	return b.String()
}

func TestBannerDevelopment(t *testing.T) {
	var o serveOptions
	o.auth.HMACSecret = "dev-secret-from-data-dir"
	text := bannerOf(o, true)
	for _, want := range []string{
		"TOKEN=$(herald token --tenant acme --sub u1 --subscribe 'orders/*' --ttl 1h)",
		"herald publish --tenant acme --channel orders/1",
		"demo page:     http://127.0.0.1:8080/?channel=orders/1&token=",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("banner lacks %q:\n%s", want, text)
		}
	}
	// A development node in another data directory: both hints name it.
	o.store.DataDir = "/var/tmp/my data"
	text = bannerOf(o, true)
	for _, want := range []string{
		"herald token --data-dir '/var/tmp/my data' --tenant acme",
		"herald publish --data-dir '/var/tmp/my data' --tenant acme",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("banner lacks %q:\n%s", want, text)
		}
	}
}

func TestBannerConfiguredNode(t *testing.T) {
	const secret = "node-secret-0123456789"
	var o serveOptions
	o.auth.HMACSecret = secret
	o.store.DatabaseURL = "postgres://herald:s3cret@db.internal:5432/app?sslmode=disable"
	o.broker.RedisURL = "redis://redis.internal:6379"
	text := bannerOf(o, false)
	for _, want := range []string{
		`herald token --jwt-hmac-secret "$HERALD_JWT_HMAC_SECRET" --tenant acme`,
		"the same secret as this node's --jwt-hmac-secret",
		"herald publish --database-url 'postgres://herald:xxxxx@db.internal:5432/app?sslmode=disable' --tenant acme",
		"password elided",
		"demo page:     http://127.0.0.1:8080/\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("banner lacks %q:\n%s", want, text)
		}
	}
	for _, never := range []string{secret, "s3cret", "token=", "TOKEN=$(herald token --tenant"} {
		if strings.Contains(text, never) {
			t.Errorf("banner contains %q:\n%s", never, text)
		}
	}
	// Without a password the URL is given whole, with no note.
	o.store.DatabaseURL = "postgres://db.internal/app"
	text = bannerOf(o, false)
	if !strings.Contains(text, "herald publish --database-url postgres://db.internal/app --tenant") || strings.Contains(text, "elided") {
		t.Errorf("publish hint:\n%s", text)
	}

	// herald token cannot mint what a --jwks node or an iss/aud check accepts.
	jwks := serveOptions{}
	jwks.auth.JWKS = "https://idp.example/jwks.json"
	jwks.store.DatabaseURL = "postgres://db.internal/app"
	text = bannerOf(jwks, false)
	if !strings.Contains(text, "mint a token:  with your identity provider") || strings.Contains(text, "token --") {
		t.Errorf("--jwks node's token hint:\n%s", text)
	}
	o.auth.Issuer = "https://idp.example"
	text = bannerOf(o, false)
	if !strings.Contains(text, "--jwt-issuer/--jwt-audience") || strings.Contains(text, "token --") {
		t.Errorf("iss-checking node's token hint:\n%s", text)
	}
}

// TestBannerDemoTokenIsShortLived: the development banner's demo link
// carries a token that lives minutes (demoTokenTTL), never a day, and says
// so: a URL is kept in browser histories and proxy logs.
func TestBannerDemoTokenIsShortLived(t *testing.T) {
	var o serveOptions
	o.auth.HMACSecret = "dev-secret-from-data-dir-0123456789"
	before := time.Now()
	text := bannerOf(o, true)
	m := regexp.MustCompile(`token=(\S+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no demo link with a token:\n%s", text)
	}
	v, err := auth.NewVerifier(auth.Config{HMACSecret: []byte(o.auth.HMACSecret)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(m[1])
	if err != nil {
		t.Fatalf("the demo token does not verify: %v", err)
	}
	if life := c.ExpiresAt.Sub(before); life > demoTokenTTL+time.Second || demoTokenTTL > 15*time.Minute {
		t.Fatalf("the demo link's token lives %s, want at most %s (and that at most 15m)", life, demoTokenTTL)
	}
	if !strings.Contains(text, "the token in this link lives 10m0s") {
		t.Fatalf("the banner does not say how long the link's token lives:\n%s", text)
	}
}
