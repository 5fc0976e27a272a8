// Package webhook delivers one outbox record to one HTTP endpoint the way
// the Standard Webhooks specification describes, and classifies what
// happened so a handler knows what to do next.
//
// An Endpoint (New) holds one endpoint's settings (Config), its signing
// secrets and its own http.Transport. Deliver POSTs one Message — the
// publication envelope of docs/protocol.md plus its tenant and kind —
// signed with every configured secret, and returns one Result whose Class
// says whether the record was delivered, should be retried (an attempt is
// burnt), is permanently refused (dead letter), met an endpoint outage (no
// attempt burnt) or was refused with 410 Gone (disable the endpoint).
// Schedule is the retry schedule as pure functions of the settings.
//
// Connections are checked when they are dialled, after name resolution:
// an address that is loopback, private, link-local (cloud metadata
// included) or otherwise special-purpose is refused unless the Config sets
// AllowPrivateNetwork, so a host name that resolves to an internal address
// (DNS rebinding included) cannot reach one.
//
// The package imports nothing of Herald's outbox; the handlers that
// consume the outbox build Messages and act on Results. docs/handlers.md
// is the contract for receivers.
package webhook
