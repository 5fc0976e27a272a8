package auth_test

import (
	"fmt"
	"log"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldgw/herald/auth"
)

// secret is the shared HS256 secret: the backend signs with it and every
// Herald node verifies with it (--jwt-hmac-secret, the raw bytes of the
// string).
var secret = []byte("change-me-to-32-random-bytes-or-more")

// A Go backend that already imports Herald mints a connection token with
// MintHS256. (auth links Herald's Redis and SQLite revocation stores; a
// backend that wants none of that signs with golang-jwt directly, as in
// the next example.)
func ExampleMintHS256() {
	token, err := auth.MintHS256(secret, auth.Claims{
		Subject:   "u1",
		Tenant:    "acme",
		Subscribe: []string{"orders/*", "users/{sub}/**"},
		Publish:   []string{"rooms/*"},
		ExpiresAt: time.Now().Add(15 * time.Minute),
	})
	if err != nil {
		log.Fatal(err)
	}

	// What a Herald node configured with the same secret reads from it.
	c, err := auth.NewHMACVerifier(secret, 0).Verify(token)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Subject, c.Tenant, c.Subscribe, c.Publish)
	// Output: u1 acme [orders/* users/{sub}/**] [rooms/*]
}

// A backend mints a connection token with github.com/golang-jwt/jwt/v5
// alone: HS256, sub, exp, and the herald claim with tenant, subscribe
// and publish.
func Example_mintWithJWT() {
	claims := jwt.MapClaims{
		"sub": "u1",
		"exp": time.Now().Add(15 * time.Minute).Unix(),
		"herald": map[string]any{
			"tenant":    "acme",
			"subscribe": []string{"orders/*", "users/{sub}/**"},
			"publish":   []string{"rooms/*"},
		},
	}
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	if err != nil {
		log.Fatal(err)
	}

	c, err := auth.NewHMACVerifier(secret, 0).Verify(token)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Subject, c.Tenant, c.Subscribe, c.Publish)

	// A token signed with another secret is refused.
	other, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte("another secret"))
	_, err = auth.NewHMACVerifier(secret, 0).Verify(other)
	fmt.Println(err != nil)
	// Output:
	// u1 acme [orders/* users/{sub}/**] [rooms/*]
	// true
}
