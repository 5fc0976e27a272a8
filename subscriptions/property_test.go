package subscriptions

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The reference below is written from the grant rules of docs/protocol.md independently of grant.go
// and internal/names: a regexp for segments and a recursive matcher.

var refSegmentRE = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,64}$`)

// refSegment: the byte/length rule, and not a dot-segment ("." or "..").
func refSegment(s string) bool { return refSegmentRE.MatchString(s) && s != "." && s != ".." }

func refValidChannel(ch string) bool {
	if len(ch) == 0 || len(ch) > 255 {
		return false
	}
	for _, s := range strings.Split(ch, "/") {
		if !refSegment(s) {
			return false
		}
	}
	return true
}

// refPattern expands and checks a grant pattern; ok is false for an
// invalid pattern.
func refPattern(p, subject string) (segs []string, ok bool) {
	if p == "" || len(p) > 255 {
		return nil, false
	}
	parts := strings.Split(p, "/")
	for i, s := range parts {
		switch {
		case s == "**" && i == len(parts)-1, s == "*":
		case s == "{sub}":
			if !refSegment(subject) {
				return nil, false
			}
			s = subject
		case refSegment(s):
		default:
			return nil, false
		}
		segs = append(segs, s)
	}
	return segs, true
}

func refMatch(pat, ch []string) bool {
	switch {
	case len(pat) == 0:
		return len(ch) == 0
	case pat[0] == "**":
		return len(ch) >= 1
	case len(ch) == 0:
		return false
	case pat[0] == "*" || pat[0] == ch[0]:
		return refMatch(pat[1:], ch[1:])
	}
	return false
}

// refGrantAllows: every pattern must be valid, and one must match.
func refGrantAllows(patterns []string, subject, channel string) bool {
	var compiled [][]string
	for _, p := range patterns {
		segs, ok := refPattern(p, subject)
		if !ok {
			return false
		}
		compiled = append(compiled, segs)
	}
	ch := strings.Split(channel, "/")
	for _, segs := range compiled {
		if refMatch(segs, ch) {
			return true
		}
	}
	return false
}

// refWebhookAllows is the test webhook's policy: a fixed pseudo-random
// quarter of (tenant, subject, channel) triples.
func refWebhookAllows(tenant, subject, channel string) bool {
	h := fnv.New32a()
	h.Write([]byte(tenant + "\x00" + subject + "\x00" + channel))
	return h.Sum32()%4 == 0
}

// instantiate fills a pattern's wildcards with random segments, usually
// producing a channel the pattern matches.
func instantiate(r *rand.Rand, pattern, subject string, lits []string) string {
	var out []string
	for _, s := range strings.Split(pattern, "/") {
		switch s {
		case "*":
			out = append(out, pick(r, lits))
		case "**":
			for range 1 + r.IntN(2) {
				out = append(out, pick(r, lits))
			}
		case "{sub}":
			out = append(out, subject)
		default:
			out = append(out, s)
		}
	}
	return strings.Join(out, "/")
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func TestPropertyAuthorizeMatchesReference(t *testing.T) {
	tenants := []string{"acme", "globex", "t-1", "initech"}
	subjects := []string{"alice", "bob", "u:1", "x.y", "a/b", "has space", "..", "..."}
	lits := []string{"orders", "users", "a", "b", "alice", "bob", "u:1", "x.y", "..."}
	patternSegs := append([]string{"*", "**", "{sub}", "*", "**", "{sub}"}, lits...)
	badSegs := []string{"", "a b", "{sub}x", "*x", "{SUB}", strings.Repeat("z", 65), ".", ".."}

	var wrongTenant, hookCalls atomic.Int64
	var expectTenant atomic.Value
	h := newHook(t, func(r webhookRequest) (int, string) {
		hookCalls.Add(1)
		if r.Tenant != expectTenant.Load().(string) {
			wrongTenant.Add(1)
		}
		if refWebhookAllows(r.Tenant, r.Subject, r.Channel) {
			return http.StatusOK, `{"allow":true,"ttl_seconds":3600}`
		}
		return http.StatusOK, `{"allow":false,"ttl_seconds":3600}`
	})
	full := newWebhookAuthorizer(t, Config{SubTokens: newVerifier(t), WebhookURL: h.URL})
	var grantsOnly Authorizer
	ctx := context.Background()

	randPattern := func(r *rand.Rand) string {
		n := 1 + r.IntN(4)
		segs := make([]string, n)
		for i := range segs {
			segs[i] = pick(r, patternSegs)
			if r.IntN(25) == 0 {
				segs[i] = pick(r, badSegs)
			}
		}
		return strings.Join(segs, "/")
	}
	randChannel := func(r *rand.Rand, subject string) string {
		if r.IntN(20) == 0 {
			return pick(r, []string{"", "a//b", "/a", "a/", "a b", strings.Repeat("a/", 128) + "a", "a/./b", "a/../b", ".."})
		}
		n := 1 + r.IntN(4)
		segs := make([]string, n)
		for i := range segs {
			if r.IntN(5) == 0 {
				segs[i] = subject
			} else {
				segs[i] = pick(r, lits)
			}
		}
		return strings.Join(segs, "/")
	}

	const iterations = 3000
	counts := map[string]int{}
	r := rand.New(rand.NewPCG(20240501, 7))
	for i := range iterations {
		tenant, subject := pick(r, tenants), pick(r, subjects)
		patterns := make([]string, r.IntN(4))
		for j := range patterns {
			patterns[j] = randPattern(r)
		}
		channel := randChannel(r, subject)
		if len(patterns) > 0 && r.IntN(2) == 0 { // aim near a grant
			channel = instantiate(r, pick(r, patterns), subject, lits)
		}
		c := conn(subject, tenant, patterns...)

		req := Request{Claims: c, Channel: channel}
		var subTenant, subSubject, subChannel string
		subValid := false
		if r.IntN(3) == 0 {
			subTenant, subSubject = tenant, subject
			if r.IntN(3) == 0 {
				subTenant = pick(r, tenants)
			}
			if r.IntN(3) == 0 {
				subSubject = pick(r, subjects)
			}
			subChannel = channel
			if r.IntN(3) == 0 || channel == "" {
				subChannel = randChannel(r, subject)
			}
			ttl := time.Hour
			if r.IntN(6) == 0 {
				ttl = -time.Hour
			}
			if subChannel != "" {
				req.SubToken = subToken(t, subSubject, subTenant, subChannel, ttl)
				subValid = ttl > 0
			}
		}
		expectTenant.Store(tenant)

		wantErr := !refValidChannel(channel)
		wantGrant := !wantErr && refGrantAllows(patterns, subject, channel)
		wantSub := !wantErr && subValid && subTenant == tenant && subSubject == subject && subChannel == channel
		wantHook := !wantErr && refWebhookAllows(tenant, subject, channel)

		d0, err0 := grantsOnly.Authorize(ctx, req)
		d1, err1 := full.Authorize(ctx, req)
		if wantErr {
			if err0 == nil || err1 == nil {
				t.Fatalf("iteration %d: invalid channel %q accepted", i, channel)
			}
			counts["invalid channel"]++
			continue
		}
		if err0 != nil || err1 != nil {
			t.Fatalf("iteration %d: unexpected errors %v / %v", i, err0, err1)
		}
		if d0.Allowed != wantGrant {
			t.Fatalf("iteration %d: grants %q, subject %q, channel %q: grants-only allowed=%v, reference %v (%s)",
				i, patterns, subject, channel, d0.Allowed, wantGrant, d0.Reason)
		}
		want := wantGrant || wantSub || wantHook
		if d1.Allowed != want {
			t.Fatalf("iteration %d: tenant %q subject %q channel %q grants %q sub-token (%q,%q,%q valid=%v): allowed=%v want %v (%s)",
				i, tenant, subject, channel, patterns, subTenant, subSubject, subChannel, subValid, d1.Allowed, want, d1.Reason)
		}
		switch {
		case wantGrant:
			counts["grant"]++
			if d1.Source != SourceGrant {
				t.Fatalf("iteration %d: source %q, want grant", i, d1.Source)
			}
		case wantSub:
			counts["sub token"]++
			if d1.Source != SourceSubToken {
				t.Fatalf("iteration %d: source %q, want sub_token", i, d1.Source)
			}
		case wantHook:
			counts["webhook"]++
			if d1.Source != SourceWebhook {
				t.Fatalf("iteration %d: source %q, want webhook", i, d1.Source)
			}
		default:
			counts["denied"]++
		}
		if req.SubToken != "" && !wantSub && subTenant != tenant {
			counts["cross-tenant sub token refused"]++
		}
	}
	if n := wrongTenant.Load(); n != 0 {
		t.Fatalf("webhook was asked about another tenant %d times", n)
	}
	t.Logf("outcomes over %d iterations: %v; webhook calls %d", iterations, counts, hookCalls.Load())
	for _, k := range []string{"grant", "sub token", "webhook", "denied", "invalid channel", "cross-tenant sub token refused"} {
		if counts[k] < 100 {
			t.Fatalf("outcome %q seen %d times: the generator does not exercise it", k, counts[k])
		}
	}
}
