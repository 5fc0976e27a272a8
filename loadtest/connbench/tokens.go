package main

import (
	"fmt"
	"time"

	"github.com/heraldgw/herald/auth"
)

// tokenTTL outlives any bounded run (connect + duration + drain), so no
// connection is asked to refresh mid-run.
const tokenTTL = 2 * time.Hour

// channelName is channel c of this run. The run id keeps runs against the
// same server apart: a fresh channel starts at offset 0 with no history.
func (r *runner) channelName(c int) string {
	if r.cfg.centrifugo() {
		return fmt.Sprintf("%s:%s-c%d", cfNamespace, r.runID, c)
	}
	return fmt.Sprintf("bench/%s/c%d", r.runID, c)
}

// subscriberToken is subscriber i's own token: its own subject (the
// per-user connection bound never applies) and a grant for exactly its
// channel.
func (r *runner) subscriberToken(i int, channel string) (string, error) {
	return r.mint(fmt.Sprintf("s%d-%s", i, r.runID), []string{channel}, nil)
}

// publisherToken may publish on every channel of the run.
func (r *runner) publisherToken() (string, error) {
	return r.mint("pub-"+r.runID, nil, []string{"bench/" + r.runID + "/*"})
}

func (r *runner) mint(sub string, subscribe, publish []string) (string, error) {
	now := time.Now()
	tok, err := auth.MintHS256([]byte(r.tgt.secret), auth.Claims{
		Subject: sub, Tenant: r.cfg.Tenant, Subscribe: subscribe, Publish: publish,
		ExpiresAt: now.Add(tokenTTL), IssuedAt: now,
	})
	if err != nil {
		return "", fmt.Errorf("connbench: mint token: %w", err)
	}
	return tok, nil
}
