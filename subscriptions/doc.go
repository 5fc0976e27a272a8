// Package subscriptions names channels and decides who may subscribe to them.
//
// A channel name is segment("/"segment)*, each segment 1–64 bytes of
// [A-Za-z0-9_.:@-], at most 255 bytes in all. A tenant id follows the segment
// rules; the module's internal/names package checks both, for this package
// and for the producers. A channel always lives inside one tenant: the pair (tenant, name) is
// its identity, and nothing in this package lets a name reach another tenant.
//
// Grants are patterns over channel names: "*" matches one segment, "**"
// matches one or more trailing segments and may only be last, "{sub}"
// expands to the token's subject. Both stand for whole segments only.
//
// Authorizer decides a subscription in this order: (a) a grant in the
// connection token, (b) a subscription token naming exactly the channel
// with the connection's sub and tenant, (c) the authorization webhook,
// whose requests carry the connection token's sid and jti and are signed
// as Standard Webhooks says (Config.WebhookSecrets), whose
// answers are cached per (tenant, subject, sid, jti, channel) for their
// TTL, and which fails closed. The tenant is always the connection's own:
// a Request carries no tenant of its own.
package subscriptions
