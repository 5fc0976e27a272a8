// Package auth verifies the JWTs that clients present, exchanges them for
// single-use tickets, records revocations, and mints development tokens.
// It knows nothing about channels beyond carrying the grant patterns a
// token holds; package subscriptions interprets them.
//
// Verifier (NewVerifier(Config)) accepts HS256/384/512 (Config.HMACSecret
// only: symmetric "oct" keys in a key set are refused), RS256/384/512,
// PS256/384/512, ES256/384/512 and EdDSA (Ed25519) from a JWK Set given
// as a URL or a file and chosen by "kid".
// "alg": "none" is never accepted, and a key is only ever used with the
// algorithms of its own type (and curve), so an HS256 token cannot be
// checked against an RSA key's bytes. The JWKS is reloaded every
// JWKSRefresh by the Start/Stop service loop, lazily by Verify when stale,
// and when a token names an unknown kid (at most once per JWKSMinRefresh).
//
// Tickets (TicketIssuer: MemoryTickets, RedisTickets) carry verified
// claims for SSE clients that cannot send headers. Revocations
// (RevocationStore: PostgresRevocations, SQLiteRevocations,
// RedisRevocations, MemoryRevocations; MirroredRevocations keeps them in
// several at once) cut sessions (sid) and tokens (jti).
package auth
