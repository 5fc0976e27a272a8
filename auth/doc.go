// Package auth verifies the JWTs that clients present and mints development
// tokens. It knows nothing about channels beyond carrying the grant patterns
// a token holds; package subscriptions interprets them.
package auth
