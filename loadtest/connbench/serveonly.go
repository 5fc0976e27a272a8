package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/heraldgw/herald/auth"
)

// serveOnly keeps the child running for other load tools (the k6 scripts
// in loadtest/k6): it prints the server's URL, its HS256 secret (the k6
// scripts mint one token per virtual user with it) and a token that may
// subscribe and publish on every bench/ channel, then waits for SIGINT or
// -serve-for.
func serveOnly(ctx context.Context, cfg config, tgt *target, out io.Writer) error {
	now := time.Now()
	tok, err := auth.MintHS256([]byte(tgt.secret), auth.Claims{
		Subject: "k6", Tenant: cfg.Tenant, Subscribe: []string{"bench/**"}, Publish: []string{"bench/**"},
		ExpiresAt: now.Add(cfg.ServeFor + time.Hour), IssuedAt: now,
	})
	if err != nil {
		return fmt.Errorf("connbench: mint token: %w", err)
	}
	fmt.Fprintf(out, "URL=%s\nSECRET=%s\nTENANT=%s\nTOKEN=%s\n", tgt.base, tgt.secret, cfg.Tenant, tok)
	fmt.Fprintf(out, "# k6 run -e BASE=%s -e SECRET=%s loadtest/k6/ws_broadcast.js\n", tgt.base, tgt.secret)
	fmt.Fprintf(out, "# serving for at most %v; Ctrl-C stops\n", cfg.ServeFor)
	select {
	case <-ctx.Done():
	case <-time.After(cfg.ServeFor):
	case <-tgt.child.Exited():
		return fmt.Errorf("connbench: herald serve exited: %v\n%s", tgt.child.WaitErr(), tgt.logTail())
	}
	return nil
}
