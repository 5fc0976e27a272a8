package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/internal/names"
	"github.com/heraldgw/herald/subscriptions"
)

func runToken(_ context.Context, args []string, stdout, stderr io.Writer) error {
	st := newCommandSettings("token", stderr)
	var (
		store                    storeSettings
		logs                     logSettings
		secret, tenant, sub, sid string
		channel, jti             string
		subscribe, publish       []string
		ttl                      time.Duration
	)
	store.register(st)
	logs.register(st)
	st.String(&secret, "jwt-hmac-secret", "", "HS256 secret (raw bytes of the string), at least 32 bytes; unset = the development secret in --data-dir; given empty it is an error")
	st.checks = append(st.checks, func() error { return checkHMACSecret(secret, st.source("jwt-hmac-secret")) })
	st.invocation(func() {
		st.String(&tenant, "tenant", "", "tenant id (required)")
		st.String(&sub, "sub", "", "subject (required)")
		st.StringList(&subscribe, "subscribe", "grant pattern for subscriptions; repeat or comma-separate")
		st.StringList(&publish, "publish", "grant pattern for client publish on interactive channels; repeat or comma-separate")
		st.String(&channel, "channel", "", "make a subscription token for exactly this channel")
		st.String(&sid, "sid", "", "session id (for revocation)")
		st.String(&jti, "jti", "", "token id (for revocation)")
		st.Duration(&ttl, "ttl", time.Hour, "lifetime")
	})
	if _, err := st.parseLogged(args, &logs, stderr); err != nil {
		return err
	}
	if err := names.ValidateTenant(tenant); err != nil {
		return fmt.Errorf("%w: --tenant: %v", errUsage, err)
	}
	if sub == "" {
		return fmt.Errorf("%w: --sub is required", errUsage)
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: --ttl must be positive", errUsage)
	}
	for _, p := range append(append([]string(nil), subscribe...), publish...) {
		if _, err := subscriptions.CompileGrant(p, sub); err != nil {
			return fmt.Errorf("%w: grant %q: %v", errUsage, p, err)
		}
	}
	if channel != "" {
		if err := names.ValidateChannel(channel); err != nil {
			return fmt.Errorf("%w: --channel: %v", errUsage, err)
		}
	}
	if secret == "" {
		s, _, err := devSecret(store.DataDir, false)
		if err != nil {
			return err
		}
		secret = s
	}
	now := time.Now()
	tok, err := auth.MintHS256([]byte(secret), auth.Claims{
		Subject: sub, Tenant: tenant, Subscribe: subscribe, Publish: publish, Channel: channel,
		SessionID: sid, TokenID: jti, ExpiresAt: now.Add(ttl), IssuedAt: now,
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}
