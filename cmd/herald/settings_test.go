package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSettingsPrecedence(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "herald.json")
	if err := os.WriteFile(cfg, []byte(`{"listen":"127.0.0.1:1","max-connections":7,"heartbeat-interval":"3s","subscribe":["a/*","b/**"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	newST := func() (*settings, *string, *int, *time.Duration, *[]string) {
		st := newSettings("x")
		st.fs.SetOutput(new(strings.Builder))
		var listen string
		var maxc int
		var hb time.Duration
		var subs []string
		st.String(&listen, "listen", "127.0.0.1:8080", "")
		st.Int(&maxc, "max-connections", 10, "")
		st.Duration(&hb, "heartbeat-interval", time.Second, "")
		st.StringList(&subs, "subscribe", "")
		return st, &listen, &maxc, &hb, &subs
	}

	st, listen, maxc, hb, subs := newST()
	if err := st.parse([]string{"--config", cfg}); err != nil {
		t.Fatal(err)
	}
	if *listen != "127.0.0.1:1" || *maxc != 7 || *hb != 3*time.Second || strings.Join(*subs, ",") != "a/*,b/**" {
		t.Fatalf("file not applied: %s %d %s %v", *listen, *maxc, *hb, *subs)
	}

	t.Setenv("HERALD_MAX_CONNECTIONS", "9")
	st, listen, maxc, _, _ = newST()
	if err := st.parse([]string{"--config", cfg, "--listen", "127.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	if *listen != "127.0.0.1:2" || *maxc != 9 {
		t.Fatalf("want flag over file and env over file: %s %d", *listen, *maxc)
	}
}

func TestSettingsErrorsNameTheSetting(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	unknown := filepath.Join(dir, "unknown.json")
	_ = os.WriteFile(bad, []byte(`{"listen": [1,2]`), 0o600)
	_ = os.WriteFile(unknown, []byte(`{"lisen": "x"}`), 0o600)
	cases := []struct {
		args []string
		env  [2]string
		want string
	}{
		{args: []string{"serve", "--max-connections", "many"}, want: "max-connections"},
		{args: []string{"serve", "--heartbeat-interval", "5"}, want: "heartbeat-interval"},
		{args: []string{"serve"}, env: [2]string{"HERALD_QUEUE_MAX_BYTES", "lots"}, want: "HERALD_QUEUE_MAX_BYTES"},
		{args: []string{"serve", "--queue-max-bytes", "2XiB"}, want: "KiB, MiB or GiB"},
		{args: []string{"serve", "--config", bad}, want: "not a JSON object"},
		{args: []string{"serve", "--config", unknown}, want: `unknown key "lisen"`},
		{args: []string{"serve", "--config", filepath.Join(dir, "missing.json")}, want: "missing.json"},
		{args: []string{"serve", "--log-level", "loud"}, want: "--log-level"},
		{args: []string{"serve", "--max-connections", "-1", "--data-dir", dir}, want: "MaxConnections"},
		{args: []string{"token", "--tenant", "acme"}, want: "--sub is required"},
		{args: []string{"token", "--tenant", "ac/me", "--sub", "u"}, want: "--tenant"},
		{args: []string{"token", "--tenant", "acme", "--sub", "u", "--subscribe", "a/**/b", "--jwt-hmac-secret", testSecret}, want: "grant"},
		{args: []string{"publish", "--tenant", "acme", "--channel", "o/1", "--type", "t", "--data", "{bad"}, want: "--data is not valid JSON"},
		{args: []string{"publish", "--tenant", "acme", "--channel", "o//1", "--type", "t", "--data", "{}"}, want: "channel"},
		{args: []string{"publish", "--tenant", "acme", "--channel", "o/1", "--type", "T!", "--data", "{}"}, want: "type"},
		{args: []string{"nope"}, want: "unknown command"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			if c.env[0] != "" {
				t.Setenv(c.env[0], c.env[1])
			}
			var out, errOut strings.Builder
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			code := run(ctx, c.args, &out, &errOut)
			if code == 0 {
				t.Fatalf("exit 0, want an error mentioning %q", c.want)
			}
			if !strings.Contains(errOut.String(), c.want) {
				t.Fatalf("stderr %q does not mention %q", errOut.String(), c.want)
			}
		})
	}
}

func TestBytesSetting(t *testing.T) {
	for in, want := range map[string]int{"1024": 1024, "64KiB": 64 << 10, "2MiB": 2 << 20, "1GiB": 1 << 30} {
		var v bytesValue
		if err := v.Set(in); err != nil || int(v) != want {
			t.Errorf("%q: got %d, %v; want %d", in, v, err, want)
		}
	}
	var v bytesValue
	if err := v.Set("1.5MiB"); err == nil {
		t.Error("1.5MiB accepted")
	}
}
