package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/clientjs"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway"
	"github.com/heraldgw/herald/outboxfeed"
	"github.com/heraldgw/herald/subscriptions"
)

// authSettings select the token key sources.
type authSettings struct {
	HMACSecret        string
	JWKS              string
	Issuer            string
	Audience          string
	MaxTokenLifetime  time.Duration
	WebhookURL        string
	WebhookAuthHeader string
	WebhookSecretFile string
	WebhookTimeout    time.Duration
	MaxTicketsPerUser int
}

func (a *authSettings) register(st *settings) {
	st.String(&a.HMACSecret, "jwt-hmac-secret", "", "HS256/384/512 key (raw bytes of the string), at least 32 bytes; given empty it is an error; serve with no key source generates a development secret in --data-dir")
	st.String(&a.JWKS, "jwks", "", "JWKS URL or file for RS/PS/ES/EdDSA keys")
	st.String(&a.Issuer, "jwt-issuer", "", "required iss claim; empty = not checked")
	st.String(&a.Audience, "jwt-audience", "", "required aud claim; empty = not checked")
	registerMaxTokenLifetime(st, &a.MaxTokenLifetime)
	st.String(&a.WebhookURL, "authz-webhook", "", "authorization webhook URL (POST {tenant,subject,channel,sid,jti}); empty = none")
	st.String(&a.WebhookAuthHeader, "authz-webhook-authorization", "", "Authorization header value sent to the webhook")
	st.String(&a.WebhookSecretFile, "authz-webhook-secret-file", "", "file of webhook secrets (whsec_<base64>, one a line) that sign every webhook request (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature), so the webhook can refuse forged and replayed calls; empty = unsigned, with a warning at start")
	st.Int(&a.MaxTicketsPerUser, "max-tickets-per-user", auth.DefaultMaxTicketsPerUser, "live tickets (POST /v1/tickets, neither redeemed nor expired) per tenant and subject, whatever addresses ask; over it: 429")
	st.Duration(&a.WebhookTimeout, "authz-webhook-timeout", subscriptions.DefaultWebhookTimeout, "bound on one webhook call; a slow or failed call denies")
	st.checks = append(st.checks, func() error { return checkHMACSecret(a.HMACSecret, st.source("jwt-hmac-secret")) })
}

// registerMaxTokenLifetime registers --max-token-lifetime (serve, revoke).
func registerMaxTokenLifetime(st *settings, p *time.Duration) {
	st.Duration(p, "max-token-lifetime", auth.DefaultMaxTokenLifetime, "longest token lifetime accepted (exp - iat, and exp - now); a longer-lived token is refused (401), and herald revoke keeps a revocation this long by default, so it outlives every token it must stop; negative = no bound (a revocation may then lapse before the token it stops)")
}

// authorizer builds the subscription authorizer.
func (a *authSettings) authorizer(v *auth.Verifier, rs auth.RevocationStore, log *slog.Logger, reg prometheus.Registerer) (*subscriptions.Authorizer, error) {
	cfg := subscriptions.Config{
		SubTokens: v, Revocations: rs, WebhookURL: a.WebhookURL, WebhookTimeout: a.WebhookTimeout,
		Logger: log, Registerer: reg,
	}
	if a.WebhookAuthHeader != "" {
		cfg.WebhookHeader = http.Header{"Authorization": []string{a.WebhookAuthHeader}}
	}
	switch {
	case a.WebhookSecretFile != "":
		b, err := os.ReadFile(a.WebhookSecretFile)
		if err != nil {
			return nil, fmt.Errorf("config: --authz-webhook-secret-file: %w", err)
		}
		if cfg.WebhookSecrets, err = subscriptions.ParseWebhookSecrets(string(b)); err != nil {
			return nil, fmt.Errorf("config: --authz-webhook-secret-file %s: %w", a.WebhookSecretFile, err)
		}
		warnReadableSecret(log, "--authz-webhook-secret-file", a.WebhookSecretFile)
	case a.WebhookURL != "":
		log.Warn("the authorization webhook's requests are NOT SIGNED: the webhook cannot tell Herald's calls from forged or replayed ones; set --authz-webhook-secret-file",
			"webhook", redactURL(a.WebhookURL))
	}
	az, err := subscriptions.NewAuthorizer(cfg)
	if err != nil {
		return nil, fmt.Errorf("config: --authz-webhook: %w", err)
	}
	return az, nil
}

type serveOptions struct {
	store  storeSettings
	broker brokerSettings
	worker workerSettings
	auth   authSettings
	log    logSettings
	gw     gateway.Config
	feed   bool
	// tickets is --tickets: false leaves POST /v1/tickets off.
	tickets bool
	// adminTokenFile is --admin-token-file; serve reads it into
	// gw.AdminToken.
	adminTokenFile string
	// trustedProxies is --trusted-proxies as given; serve parses it into
	// gw.TrustedProxies.
	trustedProxies []string
	// hub is --fanout-workers and --fanout-share.
	hub fanout.HubConfig
}

func (o *serveOptions) register(st *settings) {
	o.store.register(st)
	o.broker.register(st)
	o.broker.registerHistoryLog(st)
	o.worker.register(st)
	o.worker.registerTrigger(st)
	o.auth.register(st)
	o.log.register(st)
	registerGateway(st, &o.gw)
	st.StringList(&o.trustedProxies, "trusted-proxies", "reverse proxies (comma-separated CIDRs or IP addresses, e.g. 127.0.0.1/32,10.0.0.0/8) whose Forwarded / X-Forwarded-For headers name the client address used by --connect-attempts-per-ip and the logs; empty = trust none, the client is the TCP peer")
	st.Bool(&o.feed, "feed", true, "also run the outbox Worker in this process (false = pure edge node)")
	st.Bool(&o.tickets, "tickets", true, "serve POST /v1/tickets (single-use tickets for a token in a URL); false = it answers 404 tickets_disabled, and browser clients then put the token itself in the URL (access_token)")
	st.Int(&o.hub.FanoutWorkers, "fanout-workers", 0, "goroutines at most that hand one publication to its local subscribers, each a share of them, so a channel with thousands of subscribers is not written one after another; order per subscriber is kept; 0 = GOMAXPROCS, 1 = one goroutine")
	st.Int(&o.hub.FanoutShare, "fanout-share", fanout.DefaultFanoutShare, "fewest local subscribers a --fanout-workers goroutine is given: a publication with fewer than twice as many subscribers is handed out on one goroutine")
	st.checks = append(st.checks, func() error {
		for name, v := range map[string]int{"fanout-workers": o.hub.FanoutWorkers, "fanout-share": o.hub.FanoutShare} {
			if v < 0 {
				return fmt.Errorf("config: %s %d: want 0 or more", st.source(name).named("--"+name), v)
			}
		}
		return nil
	})
	st.String(&o.adminTokenFile, "admin-token-file", "", "file holding the admin token (a secret of at least 16 bytes; surrounding whitespace is trimmed) that turns on the read-only operator view at /ops/ (docs/operator.md); empty = the view is off (404)")
}

// registerGateway exposes the gateway's bounds as settings.
func registerGateway(st *settings, c *gateway.Config) {
	var accessTokenQuery bool
	st.String(&c.Listen, "listen", gateway.DefaultListen, "HTTP listen address")
	st.Duration(&c.HeaderTimeout, "header-timeout", gateway.DefaultHeaderTimeout, "time a client has to send an HTTP request's line and headers; a slower one is disconnected")
	st.Int(&c.MaxConnections, "max-connections", gateway.DefaultMaxConnections, "concurrent realtime connections per host")
	st.Int(&c.MaxSubscriptions, "max-subscriptions", gateway.DefaultMaxSubscriptions, "channels per connection")
	st.Bytes(&c.QueueMaxBytes, "queue-max-bytes", gateway.DefaultQueueMaxBytes, "per-connection send queue bound in bytes; beyond it the client catches up from the channel history")
	st.Int(&c.QueueMaxMessages, "queue-max-messages", gateway.DefaultQueueMaxMessages, "per-connection send queue bound in messages; beyond it the client catches up from the channel history, reading half this many at a time")
	st.Duration(&c.WriteTimeout, "write-timeout", gateway.DefaultWriteTimeout, "deadline for writing one batch to a client")
	st.Duration(&c.HeartbeatInterval, "heartbeat-interval", gateway.DefaultHeartbeatInterval, "SSE comment heartbeat / WebSocket ping interval")
	st.Duration(&c.ClientTimeout, "client-timeout", gateway.DefaultClientTimeout, "how long a client may stay silent before it is disconnected")
	st.Duration(&c.SSERetry, "sse-retry", gateway.DefaultSSERetry, "reconnect delay sent in the SSE retry: field")
	st.Bool(&accessTokenQuery, "access-token-query", true, "accept the access_token query parameter (never logged)")
	st.String(&c.CookieName, "cookie-name", gateway.DefaultCookieName, "cookie a token is read from")
	st.Duration(&c.ShutdownReconnectDelay, "shutdown-reconnect-delay", gateway.DefaultShutdownReconnectDelay, "largest jittered reconnect delay told to clients on shutdown")
	st.Bytes(&c.MaxMessageSize, "max-message-size", gateway.DefaultMaxMessageSize, "largest WebSocket message a client may send, in bytes; over it the connection is closed (message_too_big)")
	st.Int(&c.MaxInflight, "max-inflight", gateway.DefaultMaxInflight, "parallel requests per WebSocket connection; more get too_many_requests")
	st.Duration(&c.ConnectTimeout, "connect-timeout", gateway.DefaultConnectTimeout, "time a WebSocket client has to send connect")
	st.Float(&c.ConnectAttemptsPerIP, "connect-attempts-per-ip", gateway.DefaultConnectAttemptsPerIP, "connection attempts per second per IPv4 address or IPv6 /64 (negative = unlimited); over it: 429")
	st.Int(&c.ConnectAttemptsBurst, "connect-attempts-burst", gateway.DefaultConnectAttemptsBurst, "burst allowance of --connect-attempts-per-ip")
	st.Duration(&c.RevalidateInterval, "revalidate-interval", gateway.DefaultRevalidateInterval, "how often every connection's and subscription token's revocation, and lapsed webhook answers, are checked (token expiry runs on timers of its own, to the millisecond)")
	st.Duration(&c.RefreshAhead, "refresh-ahead", gateway.DefaultRefreshAhead, "how long before a token expires clients are asked for a fresh one (must exceed 500ms, how long before exp an SSE stream ends)")
	st.Duration(&c.ExpiryGrace, "expiry-grace", gateway.DefaultExpiryGrace, "how long after expiry a WebSocket client may still refresh before it is closed")
	st.Int(&c.MaxConnectionsPerUser, "max-connections-per-user", gateway.DefaultMaxConnectionsPerUser, "concurrent connections per tenant and subject on this host (negative = unlimited); over it: 429")
	st.StringList(&c.AllowedOrigins, "allowed-origins", "Origin patterns of browser pages allowed besides the same host (\"*\" = any): they may open /v1/ws (cross-site WebSocket hijacking defence) and call /v1/sse and /v1/tickets cross-origin (CORS, with credentials)")
	st.afterParse = append(st.afterParse, func() { c.DisableAccessTokenQuery = !accessTokenQuery })
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st := newCommandSettings("serve", stderr)
	var o serveOptions
	o.register(st)
	log, err := st.parseLogged(args, &o.log, stderr)
	if err != nil {
		return err
	}
	return serve(ctx, o, log, stdout)
}

func serve(ctx context.Context, o serveOptions, log *slog.Logger, stdout io.Writer) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.gw.TrustedProxies, err = parseTrustedProxies(o.trustedProxies); err != nil {
		return err
	}
	if o.feed && !o.store.isPostgres() {
		lock, err := lockDataDir(o.store.DataDir)
		if err != nil {
			return err
		}
		defer lock.release()
	}
	reg := newRegistry()

	if o.gw.AdminToken, err = readAdminToken(o.adminTokenFile, log); err != nil {
		return err
	}
	devMode := false
	if o.auth.HMACSecret == "" && o.auth.JWKS == "" {
		secret, created, err := devSecret(o.store.DataDir, true)
		if err != nil {
			return err
		}
		o.auth.HMACSecret, devMode = secret, true
		path := filepath.Join(o.store.DataDir, devSecretFile)
		log.Warn("NO TOKEN KEY CONFIGURED: using a DEVELOPMENT HMAC secret; do not use it in production (set --jwt-hmac-secret or --jwks)",
			"file", path, "created", created)
	}
	verifier, err := auth.NewVerifier(auth.Config{
		HMACSecret: []byte(o.auth.HMACSecret), JWKS: o.auth.JWKS, Issuer: o.auth.Issuer, Audience: o.auth.Audience,
		MaxLifetime: o.auth.MaxTokenLifetime, Logger: log, Registerer: reg,
	})
	if err != nil {
		return fmt.Errorf("config: --jwt-hmac-secret/--jwks: %w", err)
	}
	if err := verifier.Start(ctx); err != nil {
		return err
	}
	defer verifier.Stop()

	rdb, err := openRedis(ctx, o.broker)
	if err != nil {
		return err
	}
	if rdb != nil {
		defer rdb.Close()
	}
	revocations, revWhere, closeRevocations, err := openRevocations(ctx, o.store, o.broker, rdb)
	if err != nil {
		return err
	}
	defer closeRevocations()
	tickets, err := openTickets(rdb, auth.TicketConfig{Prefix: o.broker.RedisPrefix, MaxPerUser: o.auth.MaxTicketsPerUser})
	if err != nil {
		return fmt.Errorf("config: tickets: %w", err)
	}
	if !o.tickets {
		tickets = nil // POST /v1/tickets answers 404 tickets_disabled
	}
	authorizer, err := o.auth.authorizer(verifier, revocations, log, reg)
	if err != nil {
		return err
	}

	store, err := openStore(ctx, o.store, o.worker.NotifyTrigger, log)
	if err != nil {
		return err
	}
	defer store.Close()

	historyDir := o.broker.historyDir(o.store)
	if historyDir != "" {
		lock, err := lockHistoryDir(historyDir)
		if err != nil {
			return err
		}
		defer lock.release() // after broker.Stop, deferred below
	}
	broker, brokerName, err := o.broker.open(log, reg, historyDir)
	if err != nil {
		return err
	}
	defer broker.Stop()
	defer writeStageTrace() // a diagnostic build's timings, once the Workers stopped
	hubCfg := o.hub
	hubCfg.Logger, hubCfg.Registerer = log, reg
	hub, err := fanout.NewHub(broker, hubCfg)
	if err != nil {
		return err
	}
	if err := broker.Start(ctx, hub); err != nil {
		return err
	}

	outboxCheck := store.Ping
	if o.feed {
		wcfg, err := o.worker.config(log, reg)
		if err != nil {
			return err
		}
		ws, err := startWorkers(ctx, store, stagePublisher(broker), wcfg, o.worker.Handlers.entries, log, reg)
		if err != nil {
			return err
		}
		defer ws.stop()
		worker := ws.realtime
		pruner, err := o.worker.startPruner(ctx, store, log, reg)
		if err != nil {
			return err
		}
		defer pruner.Stop()
		outboxCheck = func(ctx context.Context) error {
			if err := worker.Readiness(); err != nil {
				return err
			}
			return store.Ping(ctx)
		}
	}

	o.gw.HistorySize = o.broker.HistorySize
	o.gw.HistoryTTL = o.broker.HistoryTTL
	o.gw.Version = version
	srv, err := gateway.New(o.gw, gateway.Deps{
		Verifier:    verifier,
		Authorizer:  authorizer,
		Revocations: revocations,
		Tickets:     tickets,
		Broker:      broker,
		Hub:         hub,
		ReadyChecks: []gateway.ReadyCheck{
			{Name: "outbox", Check: outboxCheck},
			{Name: "broker", Check: broker.Ping},
		},
		Logger: log, Registerer: reg, Gatherer: reg,
		ClientJS: clientjs.FS,
		Ops:      storeOps{store},
	})
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer srv.Stop()

	storeName := "SQLite " + o.store.url()
	if o.store.isPostgres() {
		storeName = "PostgreSQL"
	}
	banner(stdout, "http://"+srv.Addr(), storeName, brokerName, o, devMode)
	log.Info("herald serving", "addr", srv.Addr(), "store", storeName, "broker", brokerName, "revocations", revWhere, "feed", o.feed, "version", version)

	<-ctx.Done()
	log.Info("herald stopping")
	return nil
}

// parseTrustedProxies reads --trusted-proxies: each entry a CIDR prefix
// without host bits, or one IP address (a /32 or /128).
func parseTrustedProxies(entries []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, e := range entries {
		bad := func(why string) error {
			return fmt.Errorf("config: --trusted-proxies: entry %q %s", e, why)
		}
		if !strings.Contains(e, "/") {
			a, err := netip.ParseAddr(e)
			if err != nil || a.Zone() != "" {
				return nil, bad("is neither an IP address nor a CIDR prefix such as 10.0.0.0/8")
			}
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return nil, bad("is neither an IP address nor a CIDR prefix such as 10.0.0.0/8")
		}
		if m := p.Masked(); m != p {
			return nil, bad(fmt.Sprintf("has bits set past its /%d: write %s, or %s/%d for the one address", p.Bits(), m, p.Addr(), p.Addr().BitLen()))
		}
		out = append(out, p)
	}
	return out, nil
}

// demoTokenTTL is the life of the token in the development banner's demo
// link: a URL is kept in browser histories and proxy logs, so the token in
// it must not outlive a first try.
const demoTokenTTL = 10 * time.Minute

// banner tells a newcomer where Herald listens, how to mint a token and how
// to publish. The hints carry the node's own settings, so what they print
// works against this node: the same --data-dir or --database-url (its
// password elided), the same token key (named, never printed). Where
// herald token cannot mint a token this node accepts (--jwks only, or a
// required iss/aud), the hint says so instead.
func banner(w io.Writer, base, store, broker string, o serveOptions, devMode bool) {
	self := "herald"
	if a := os.Args[0]; strings.HasPrefix(a, "./") || strings.HasPrefix(a, "bin/") {
		self = a
	}
	storeFlags := ""
	switch {
	case o.store.DatabaseURL != "":
		storeFlags = " --database-url " + shellQuote(redactURL(o.store.DatabaseURL))
	case o.store.DataDir != defaultDataDir:
		storeFlags = " --data-dir " + shellQuote(o.store.DataDir)
	}
	fmt.Fprintf(w, "Herald %s listening on %s (store: %s, broker: %s, worker: %v)\n", version, base, store, broker, o.feed)
	const claims = " --tenant acme --sub u1 --subscribe 'orders/*' --ttl 1h"
	switch {
	case devMode:
		dataDir := ""
		if o.store.DataDir != defaultDataDir {
			dataDir = " --data-dir " + shellQuote(o.store.DataDir)
		}
		fmt.Fprintf(w, "  mint a token:  TOKEN=$(%s token%s%s)\n", self, dataDir, claims)
	case o.auth.HMACSecret == "":
		fmt.Fprintf(w, "  mint a token:  with your identity provider: this node verifies keys from --jwks, and herald token mints only HS256 tokens (--jwt-hmac-secret)\n")
	case o.auth.Issuer != "" || o.auth.Audience != "":
		fmt.Fprintf(w, "  mint a token:  with your identity provider: this node requires iss/aud (--jwt-issuer/--jwt-audience), which herald token does not set\n")
	default:
		fmt.Fprintf(w, "  mint a token:  TOKEN=$(%s token --jwt-hmac-secret \"$HERALD_JWT_HMAC_SECRET\"%s)   (the same secret as this node's --jwt-hmac-secret)\n", self, claims)
	}
	fmt.Fprintf(w, "  open a stream: curl -N -H \"Authorization: Bearer $TOKEN\" '%s/v1/sse?channel=orders/1'\n", base)
	note := ""
	if u := o.store.DatabaseURL; u != "" && redactURL(u) != u {
		note = "   (password elided: use this node's --database-url)"
	}
	fmt.Fprintf(w, "  publish:       %s publish%s --tenant acme --channel orders/1 --type order.updated --data '{\"status\":\"paid\"}'%s\n", self, storeFlags, note)
	if devMode {
		now := time.Now()
		tok, err := auth.MintHS256([]byte(o.auth.HMACSecret), auth.Claims{
			Subject: "demo", Tenant: "acme", Subscribe: []string{"orders/*"}, ExpiresAt: now.Add(demoTokenTTL), IssuedAt: now,
		})
		if err == nil {
			fmt.Fprintf(w, "  demo page:     %s/?channel=orders/1&token=%s\n", base, tok)
			fmt.Fprintf(w, "                 (the token in this link lives %s: links end up in histories and logs; mint a longer one as above)\n", demoTokenTTL)
		}
	} else {
		fmt.Fprintf(w, "  demo page:     %s/\n", base)
	}
	if o.adminTokenFile != "" {
		fmt.Fprintf(w, "  operator view: %s/ops/   (read-only; asks for the token in --admin-token-file)\n", base)
	} else {
		fmt.Fprintf(w, "  operator view: off; to see readiness, connections and the outbox at %s/ops/, start with --admin-token-file FILE (a secret of 16 bytes or more)\n", base)
	}
}

// readAdminToken reads --admin-token-file ("" = none): the file's contents
// with surrounding whitespace trimmed, as the development secret is read.
// A token the gateway would refuse (gateway.CheckAdminToken) fails here,
// naming the file.
func readAdminToken(path string, log *slog.Logger) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("config: --admin-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < gateway.MinAdminTokenLen {
		return "", fmt.Errorf("config: --admin-token-file %s is %d bytes: the admin token must be at least %d bytes, or it can be guessed; make one with: openssl rand -base64 32 > %s",
			path, len(tok), gateway.MinAdminTokenLen, shellQuote(path))
	}
	if err := gateway.CheckAdminToken(tok); err != nil {
		return "", fmt.Errorf("config: --admin-token-file %s: the admin token %v (make one with: openssl rand -base64 32 > %s)", path, err, shellQuote(path))
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the admin token file can be read by other users; it is a secret like the HMAC key (chmod 600 it)",
			"file", path, "mode", fi.Mode().Perm().String())
	}
	return tok, nil
}

// warnReadableSecret warns when the secret file path, given by flag, can
// be read or written by users other than its owner.
func warnReadableSecret(log *slog.Logger, flag, path string) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("a secret file can be read or written by other users (chmod 600 it)",
			"setting", flag, "file", path, "mode", fi.Mode().Perm().String())
	}
}

// storeOps gives the operator view the outbox backlog: Store.Stats, the
// cheap count (partial indexes) the Worker's gauges use, not the full
// count of `herald outbox stats`, since the page asks every few seconds.
type storeOps struct{ store outboxfeed.Store }

// OutboxStatus implements gateway.OpsSource.
func (s storeOps) OutboxStatus(ctx context.Context) (gateway.OutboxStatus, error) {
	st, err := s.store.Stats(ctx)
	if err != nil {
		return gateway.OutboxStatus{}, err
	}
	out := gateway.OutboxStatus{Pending: st.Pending, DeadLetters: st.DeadLetter, OldestPending: st.OldestPending}
	if !st.OldestPending.IsZero() {
		now := st.Now
		if now.IsZero() { // a Store that does not say
			now = time.Now()
		}
		out.OldestPendingAge = max(0, now.Sub(st.OldestPending))
	}
	hs, ok := s.store.(outboxfeed.HandlerStore)
	if !ok {
		return out, nil
	}
	list, err := hs.Handlers(ctx)
	if err != nil {
		return gateway.OutboxStatus{}, err
	}
	for _, h := range list {
		st := st
		if h.Name != outboxfeed.RealtimeHandler {
			if st, err = hs.ForHandler(h.Name).Stats(ctx); err != nil {
				return gateway.OutboxStatus{}, err
			}
		}
		row := gateway.HandlerStatus{Name: h.Name, Type: h.Type, State: string(h.State), StateReason: h.StateReason,
			Pending: st.Pending, DeadLetters: st.DeadLetter, TargetUp: h.FailingSince.IsZero() && h.State != outboxfeed.HandlerDisabled,
			LastError: h.LastError}
		if !h.FailingSince.IsZero() {
			row.FailingSince = &h.FailingSince
		}
		if !st.OldestPending.IsZero() && !st.Now.IsZero() {
			row.OldestPendingAge = max(0, st.Now.Sub(st.OldestPending)).Seconds()
		}
		if h.Name == outboxfeed.RealtimeHandler {
			out.Handlers = append([]gateway.HandlerStatus{row}, out.Handlers...)
		} else {
			out.Handlers = append(out.Handlers, row)
		}
	}
	return out, nil
}

// redactURL hides the password of a URL such as postgres://u:p@h/db; a
// value that is not such a URL (an SQLite path) is returned as is.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:@%+=,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
