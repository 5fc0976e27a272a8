package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/internal/testenv"
)

// wantRefused runs herald with args and fails unless it exits with code
// and its stderr holds every one of want (the message names the fix).
func wantRefused(t *testing.T, code int, want []string, args ...string) string {
	t.Helper()
	got, out, errOut := herald(t, args...)
	if got != code {
		t.Fatalf("herald %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got, code, out, errOut)
	}
	for _, w := range want {
		if !strings.Contains(errOut, w) {
			t.Errorf("herald %s: stderr lacks %q:\n%s", strings.Join(args, " "), w, errOut)
		}
	}
	return errOut
}

// TestDatabaseURLRefused: a --database-url that is not a PostgreSQL URL
// (a typo in the scheme, another database, a path) stops every command
// before it opens anything, naming the accepted forms and --data-dir,
// wherever the value came from; nothing is created where the URL pointed.
func TestDatabaseURLRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "not-a-url")
	cfg := filepath.Join(dir, "herald.json")
	if err := os.WriteFile(cfg, []byte(`{"database-url": "mysql://root@127.0.0.1/app"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []string{"is not a PostgreSQL URL", "postgres://USER@HOST:5432/DATABASE", "postgresql://", "leave --database-url empty", "--data-dir"}
	commands := [][]string{
		{"serve", "--listen", "127.0.0.1:0"}, {"feed", "--listen", ""}, {"migrate"}, {"token", "--tenant", "acme", "--sub", "u1"},
		{"publish", "--tenant", "acme", "--channel", "orders/1", "--type", "order.updated", "--data", "{}"},
		{"outbox", "stats"}, {"revoke", "list"},
	}
	for _, url := range []string{"postgress://postgres@127.0.0.1:5432/app", "mysql://root@127.0.0.1/app", path} {
		for _, c := range commands {
			t.Run(c[0]+" "+url, func(t *testing.T) {
				args := append(append([]string(nil), c...), "--data-dir", filepath.Join(dir, "data"), "--database-url", url)
				wantRefused(t, 1, append(want, `"`+url+`"`), args...)
			})
		}
	}
	if _, err := os.Stat("postgress:"); err == nil {
		t.Error("a directory named after the mistyped URL was created")
	}
	for _, p := range []string{path, filepath.Join(dir, "data")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was created", p)
		}
	}
	t.Run("environment", func(t *testing.T) {
		t.Setenv("HERALD_DATABASE_URL", "postgress://postgres@127.0.0.1:5432/app")
		wantRefused(t, 1, append(want, "(from HERALD_DATABASE_URL)"), "migrate", "--data-dir", filepath.Join(dir, "data"))
	})
	t.Run("config file", func(t *testing.T) {
		wantRefused(t, 1, append(want, `(from `+cfg+` key "database-url")`), "migrate", "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	})
	t.Run("password elided", func(t *testing.T) {
		errOut := wantRefused(t, 1, want, "migrate", "--database-url", "postgress://app:hunter2@db/app")
		if strings.Contains(errOut, "hunter2") {
			t.Errorf("the message shows the password: %s", errOut)
		}
	})
}

// TestRedisURLRefused: a --redis-url the Redis client cannot read stops
// serve, feed and revoke at start-up, naming the forms it takes and that
// empty means the in-memory broker.
func TestRedisURLRefused(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		url   string
		extra []string
		forms string
	}{
		{"localhost:6379", nil, "redis://HOST:6379/0, rediss://… (TLS) or unix:///path/to/redis.sock"},
		{"http://127.0.0.1:6379", nil, "redis://HOST:6379/0"},
		{"unix:///run/redis.sock", []string{"--redis-cluster"}, "redis://HOST:6379 or rediss://… (TLS), more seeds as ?addr=HOST:PORT"},
	} {
		for _, cmd := range [][]string{{"serve", "--listen", "127.0.0.1:0"}, {"feed", "--listen", ""}, {"revoke", "list"}} {
			t.Run(cmd[0]+" "+c.url, func(t *testing.T) {
				args := append(append(append([]string(nil), cmd...), c.extra...), "--data-dir", dir, "--redis-url", c.url)
				wantRefused(t, 1, []string{`--redis-url "` + c.url + `" is not a Redis URL`, c.forms, "leave it empty for the in-memory broker"}, args...)
			})
		}
	}
	t.Run("environment", func(t *testing.T) {
		t.Setenv("HERALD_REDIS_URL", "redis//127.0.0.1:6379")
		wantRefused(t, 1, []string{"--redis-url (from HERALD_REDIS_URL)", "is not a Redis URL", "redis://HOST:6379/0"}, "feed", "--listen", "", "--data-dir", dir)
	})
}

// TestRedisSentinelSettingsRefused: the Sentinel settings go together,
// without --redis-cluster, with sentinels given as host:port.
func TestRedisSentinelSettingsRefused(t *testing.T) {
	dir := t.TempDir()
	together := "--redis-sentinel-master and --redis-sentinel-addrs go together, without --redis-cluster"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--redis-sentinel-master", "herald"}, together},
		{[]string{"--redis-sentinel-addrs", "127.0.0.1:26379"}, together},
		{[]string{"--redis-sentinel-master", "herald", "--redis-sentinel-addrs", "127.0.0.1:26379", "--redis-cluster"}, together},
		{[]string{"--redis-sentinel-master", "herald", "--redis-sentinel-addrs", "127.0.0.1"}, `SentinelAddrs "127.0.0.1": want host:port`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			wantRefused(t, 1, []string{c.want}, append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dir}, c.args...)...)
		})
	}
}

// TestMissingDataDirRefused: publish, migrate and the outbox commands on
// the embedded store, run where the data directory does not exist or
// holds no outbox, stop without creating anything, naming the directory
// they looked in (absolute, and how a relative --data-dir was read) and
// the flags that fix it. --create-data-dir creates it (publish, migrate).
func TestMissingDataDirRefused(t *testing.T) {
	t.Chdir(t.TempDir())
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	publish := []string{"publish", "--tenant", "acme", "--channel", "orders/1", "--type", "order.updated", "--data", `{"status":"paid"}`}
	commands := map[string]struct {
		args   []string
		create bool
	}{
		"publish":           {publish, true},
		"migrate":           {[]string{"migrate"}, true},
		"outbox stats":      {[]string{"outbox", "stats"}, false},
		"outbox list":       {[]string{"outbox", "list"}, false},
		"outbox replay":     {[]string{"outbox", "replay", "--actor", "a", "--reason", "r", "--type", "order.updated"}, false},
		"outbox purge":      {[]string{"outbox", "purge", "--state", "dispatched", "--older-than", "7d"}, false},
		"outbox partitions": {[]string{"outbox", "partitions"}, false},
	}
	empty := filepath.Join(cwd, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, c := range commands {
		t.Run(name, func(t *testing.T) {
			fix := []string{"Run this where the nodes' data directory is", "--data-dir", "--database-url"}
			if c.create {
				fix = append(fix, "--create-data-dir")
			}
			// The default ./herald-data, in a directory without one.
			wantRefused(t, 1, append(fix, "the data directory "+filepath.Join(cwd, "herald-data")+" (--data-dir ./herald-data, relative to the current directory) does not exist"), c.args...)
			// A directory that exists but holds no outbox.
			wantRefused(t, 1, append(fix, "the data directory "+empty+" holds no outbox (herald.db)"), append(c.args, "--data-dir", empty)...)
			if entries, _ := os.ReadDir(cwd); len(entries) != 1 {
				t.Fatalf("the refused command created something in %s: %v", cwd, entries)
			}
			if entries, _ := os.ReadDir(empty); len(entries) != 0 {
				t.Fatalf("the refused command created something in %s: %v", empty, entries)
			}
		})
	}

	t.Run("create", func(t *testing.T) {
		dir := filepath.Join(cwd, "new")
		out := mustHerald(t, "migrate", "--log-level", "warn", "--data-dir", dir, "--create-data-dir")
		if !strings.Contains(out, filepath.Join(dir, "herald.db")) {
			t.Errorf("migrate --create-data-dir: %q", out)
		}
		code, out, errOut := herald(t, append(publish, "--data-dir", filepath.Join(cwd, "other"), "--create-data-dir")...)
		if code != 0 || !uuidRE.MatchString(strings.TrimSpace(out)) {
			t.Fatalf("publish --create-data-dir: exit %d, %q, %s", code, out, errOut)
		}
		// Staged where no node consumes it: said, not silent.
		if !strings.Contains(errOut, "no herald serve or feed consumes this outbox now") || !strings.Contains(errOut, filepath.Join(cwd, "other")) {
			t.Errorf("publish into an outbox no node consumes says nothing: %s", errOut)
		}
		mustHerald(t, "outbox", "stats", "--data-dir", dir)
	})
}

// verifierFor verifies HS256 tokens of secret.
func verifierFor(t *testing.T, secret string) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(auth.Config{HMACSecret: []byte(secret)})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// claimsOf decodes a token's payload (no verification: the test minted it).
func claimsOf(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSecretsRefused: --jwt-hmac-secret given empty (by the flag or the
// environment, as an unset shell variable expands) is an error for serve
// and token, never a fallback to the development secret; a secret under
// 32 bytes is refused with the reason; both name the way to make one. In a
// config file an empty value is no key given, as genconfig writes it.
func TestSecretsRefused(t *testing.T) {
	dir := t.TempDir()
	emptyWant := []string{"is empty", "never a cue to use another one", "at least 32 bytes", "head -c 32 /dev/urandom | base64", "leave --jwt-hmac-secret unset"}
	shortWant := []string{"is 3 bytes", "at least 32 bytes", "RFC 7518", "head -c 32 /dev/urandom | base64"}
	cfgShort := filepath.Join(dir, "short.json")
	if err := os.WriteFile(cfgShort, []byte(`{"jwt-hmac-secret": "abc"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	token := []string{"token", "--tenant", "acme", "--sub", "u1"}
	serve := []string{"serve", "--listen", "127.0.0.1:0"}
	for _, c := range [][]string{serve, token} {
		t.Run(c[0], func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			args := append(append([]string(nil), c...), "--data-dir", data)
			wantRefused(t, 1, append(emptyWant, "--jwt-hmac-secret is empty"), append(args, "--jwt-hmac-secret", "")...)
			wantRefused(t, 1, append(shortWant, "--jwt-hmac-secret is 3 bytes"), append(args, "--jwt-hmac-secret", "abc")...)
			wantRefused(t, 1, append(shortWant, `(from `+cfgShort+` key "jwt-hmac-secret")`), append(args, "--config", cfgShort)...)
			t.Run("environment", func(t *testing.T) {
				t.Setenv("HERALD_JWT_HMAC_SECRET", "")
				wantRefused(t, 1, append(emptyWant, "--jwt-hmac-secret (from HERALD_JWT_HMAC_SECRET) is empty"), args...)
				t.Setenv("HERALD_JWT_HMAC_SECRET", "abc")
				wantRefused(t, 1, append(shortWant, "(from HERALD_JWT_HMAC_SECRET) is 3 bytes"), args...)
			})
			if _, err := os.Stat(data); err == nil {
				t.Errorf("a refused %s created its data directory (a development secret)", c[0])
			}
		})
	}

	t.Run("config file empty is unset", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		secret, _, err := devSecret(data, true)
		if err != nil {
			t.Fatal(err)
		}
		cfg := writeConfig(t, "herald.json", `{"jwt-hmac-secret": ""}`)
		tok := strings.TrimSpace(mustHerald(t, append(token, "--data-dir", data, "--config", cfg)...))
		v := verifierFor(t, secret)
		if _, err := v.Verify(tok); err != nil {
			t.Fatalf("the token is not signed with the development secret: %v", err)
		}
	})

	t.Run("short development secret", func(t *testing.T) {
		data := t.TempDir()
		if err := os.WriteFile(filepath.Join(data, devSecretFile), []byte("abc\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, 1, []string{"is 3 bytes, under the 32 an HS256 key needs", "delete it"}, append(token, "--data-dir", data)...)
	})

	t.Run("32 bytes", func(t *testing.T) {
		key := strings.Repeat("k", 32)
		tok := strings.TrimSpace(mustHerald(t, append(token, "--jwt-hmac-secret", key)...))
		if _, err := verifierFor(t, key).Verify(tok); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPerInvocationFlagsNotFromEnvironment: the flags of one invocation
// (a token's claims, a publication's channel and data, an outbox
// command's selection) are not HERALD_* variables: exported, they change
// nothing, and their usage names no variable. A config file naming one is
// refused, saying to pass the flag.
func TestPerInvocationFlagsNotFromEnvironment(t *testing.T) {
	for k, v := range map[string]string{
		"HERALD_CHANNEL": "orders/9", "HERALD_TYPE": "bogus!", "HERALD_DATA": `{"x":1}`, "HERALD_ID": "not-a-uuid",
		"HERALD_TENANT": "globex", "HERALD_SUB": "intruder", "HERALD_SUBSCRIBE": "secrets/**", "HERALD_PUBLISH": "rooms/*",
		"HERALD_SID": "s9", "HERALD_JTI": "j9", "HERALD_TTL": "1000h", "HERALD_KIND": "bogus", "HERALD_SCHEMA_VERSION": "7",
		"HERALD_STATE": "bogus", "HERALD_LIMIT": "0", "HERALD_JSON": "maybe", "HERALD_FOR": "-1h", "HERALD_CREATE_DATA_DIR": "true",
	} {
		t.Setenv(k, v)
	}
	t.Setenv("HERALD_JWT_HMAC_SECRET", testSecret) // a deployment setting: read

	tok := strings.TrimSpace(mustHerald(t, "token", "--tenant", "acme", "--sub", "u1", "--subscribe", "orders/*"))
	c := claimsOf(t, tok)
	h, _ := c["herald"].(map[string]any)
	if h["tenant"] != "acme" || c["sub"] != "u1" || h["channel"] != nil || h["publish"] != nil || c["sid"] != nil || c["jti"] != nil {
		t.Errorf("the exported variables reached the token: %v", c)
	}
	if subs, _ := h["subscribe"].([]any); len(subs) != 1 || subs[0] != "orders/*" {
		t.Errorf("subscribe = %v", h["subscribe"])
	}
	if exp, iat := c["exp"].(float64), c["iat"].(float64); exp-iat != 3600 {
		t.Errorf("lifetime %vs, want the default 1h (HERALD_TTL is not read)", exp-iat)
	}
	if _, err := verifierFor(t, testSecret).Verify(tok); err != nil {
		t.Errorf("HERALD_JWT_HMAC_SECRET was not used: %v", err)
	}

	// publish takes none of them: its required flags stay missing, and it
	// does not create a data directory (HERALD_CREATE_DATA_DIR).
	dir := filepath.Join(t.TempDir(), "data")
	wantRefused(t, 2, []string{"--data is required"}, "publish", "--data-dir", dir)
	wantRefused(t, 1, []string{"does not exist", "--create-data-dir"}, "publish", "--data-dir", dir,
		"--tenant", "acme", "--channel", "orders/1", "--type", "order.updated", "--data", "{}")
	mustHerald(t, "migrate", "--log-level", "warn", "--data-dir", dir, "--create-data-dir")
	// outbox list: HERALD_STATE, HERALD_LIMIT, HERALD_JSON would each fail it.
	mustHerald(t, "outbox", "list", "--data-dir", dir)
	// revoke: HERALD_SID and HERALD_FOR would make this a revocation.
	wantRefused(t, 2, []string{"give exactly one of --sid and --jti"}, "revoke", "--data-dir", dir)

	var help strings.Builder
	run(context.Background(), []string{"publish", "-h"}, &help, &help)
	if strings.Contains(help.String(), "HERALD_CHANNEL") || !strings.Contains(help.String(), "HERALD_DATA_DIR") {
		t.Errorf("publish -h names a variable for a per-invocation flag, or none for its store:\n%s", help.String())
	}

	cfg := writeConfig(t, "herald.yaml", "listen: 127.0.0.1:0\nchannel: orders/1\n")
	for _, cmd := range [][]string{{"publish"}, {"token"}, {"migrate"}, {"outbox", "stats"}} {
		wantRefused(t, 1, []string{cfg + ":2", `key "channel" is a flag given per invocation`, "herald publish", "herald token", "pass --channel on the command line"},
			append(cmd, "--config", cfg, "--data-dir", dir)...)
	}
}

// TestSharedConfigFile: one config file holding every setting of every
// command (a node's, say) serves every command, by --config and by
// HERALD_CONFIG: each takes its keys and ignores the others, listing them
// at debug level. A key no command has is refused, naming the nearest.
func TestSharedConfigFile(t *testing.T) {
	dir := t.TempDir()
	redisURL, prefix := testenv.Redis(t)
	all := map[string]any{}
	for _, words := range commandWords() {
		st := describeCommand(words)
		if st == nil {
			continue
		}
		for _, s := range st.configurable() {
			all[s.name] = jsonValue(s.value)
		}
	}
	for k, v := range map[string]any{
		"data-dir": filepath.Join(dir, "data"), "listen": "127.0.0.1:0", "jwt-hmac-secret": testSecret, "log-level": "debug",
		"redis-url": redisURL, "redis-key-prefix": prefix, "outbox-poll-interval": "20ms",
	} {
		all[k] = v
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "node.json")
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"--config", "HERALD_CONFIG"} {
		t.Run(how, func(t *testing.T) {
			conf := []string{"--config", cfg}
			if how == "HERALD_CONFIG" {
				t.Setenv("HERALD_CONFIG", cfg)
				conf = nil
			}
			cmd := func(args ...string) []string { return append(args, conf...) }
			mustHerald(t, cmd("migrate", "--create-data-dir")...)
			code, out, errOut := herald(t, cmd("token", "--tenant", "acme", "--sub", "u1", "--subscribe", "orders/*")...)
			if code != 0 {
				t.Fatalf("token: exit %d: %s", code, errOut)
			}
			if _, err := verifierFor(t, testSecret).Verify(strings.TrimSpace(out)); err != nil {
				t.Errorf("token did not sign with the file's key: %v", err)
			}
			if !strings.Contains(errOut, "keys of other herald commands ignored") || !strings.Contains(errOut, "listen") {
				t.Errorf("token does not list the keys it ignored at debug level: %s", errOut)
			}
			id := strings.TrimSpace(mustHerald(t, cmd("publish", "--tenant", "acme", "--channel", "orders/1", "--type", "order.updated", "--data", "{}")...))
			mustHerald(t, cmd("outbox", "stats")...)
			if rules := mustHerald(t, cmd("alerts")...); !strings.Contains(rules, "- name: herald-outbox-handler-realtime") {
				t.Errorf("alerts with the shared file wrote no realtime group:\n%s", rules)
			}
			mustHerald(t, cmd("outbox", "list")...)
			mustHerald(t, cmd("outbox", "replay", "--actor", "a", "--reason", "r", "--id", id)...)
			mustHerald(t, cmd("outbox", "purge", "--state", "dispatched", "--older-than", "7d", "--dry-run")...)
			mustHerald(t, cmd("outbox", "partitions")...)
			mustHerald(t, cmd("revoke", "--sid", "s1")...)
			mustHerald(t, cmd("revoke", "list")...)
			for _, long := range [][]string{{"serve"}, {"feed"}} {
				runUntilStarted(t, cmd(long...)...)
			}
		})
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("listen: 127.0.0.1:0\nlisen: 127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, words := range commandWords() {
		if describeCommand(words) == nil {
			continue
		}
		errOut := wantRefused(t, 1, []string{bad + ":2", `unknown key "lisen"`, `the nearest is "listen"`}, append(words, "--config", bad)...)
		if strings.Contains(errOut, `e.g. "listen"`) {
			t.Errorf("the old self-contradicting message: %s", errOut)
		}
	}
}

// runUntilStarted runs a long-running command (serve, feed) in-process
// until it prints its first line, then stops it.
func runUntilStarted(t *testing.T, args ...string) {
	t.Helper()
	p := startInProcess(args)
	defer p.stop(t, time.Minute)
	p.waitUntil(t, time.Minute, "its first line", func() bool { return strings.Contains(p.out.String(), "\n") })
}

// TestFanoutSettingsRefused: a negative --fanout-workers or --fanout-share
// stops serve before it listens, naming the setting and where it came from.
func TestFanoutSettingsRefused(t *testing.T) {
	dir := t.TempDir()
	wantRefused(t, 1, []string{"--fanout-workers -2: want 0 or more"},
		"serve", "--listen", "127.0.0.1:0", "--data-dir", dir, "--fanout-workers", "-2")
	t.Setenv("HERALD_FANOUT_SHARE", "-1")
	wantRefused(t, 1, []string{"--fanout-share (from HERALD_FANOUT_SHARE) -1: want 0 or more"},
		"serve", "--listen", "127.0.0.1:0", "--data-dir", dir)
}
