package webhook

import (
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	want := Config{
		Timeout: 15 * time.Second, MaxInFlight: 16, ClaimDelay: 20 * time.Millisecond, MaxAttempts: 10, MaxAge: 72 * time.Hour,
		RetryBaseDelay: 10 * time.Second, RetryMaxDelay: 24 * time.Hour,
		OutageBaseDelay: time.Second, OutageMaxDelay: 5 * time.Minute,
		RetryAfterMax: time.Hour, DisableAfter: 120 * time.Hour,
	}
	if c.Timeout != want.Timeout || c.MaxInFlight != want.MaxInFlight || c.ClaimDelay != want.ClaimDelay || c.MaxAttempts != want.MaxAttempts ||
		c.MaxAge != want.MaxAge || c.RetryBaseDelay != want.RetryBaseDelay || c.RetryMaxDelay != want.RetryMaxDelay ||
		c.OutageBaseDelay != want.OutageBaseDelay || c.OutageMaxDelay != want.OutageMaxDelay ||
		c.RetryAfterMax != want.RetryAfterMax || c.DisableAfter != want.DisableAfter || c.AllowPrivateNetwork {
		t.Fatalf("defaults %+v", c)
	}
}

// Every wrong setting stops New with an error that names its key (and
// never a secret).
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	short := Secret("whsec_" + "c2hvcnQga2V5")                                                 // 9 bytes
	notB64 := Secret("whsec_" + strings.TrimPrefix(string(testSecretB), "whsec_")[:20] + "!!") // a piece of B, then junk
	noPrefix := Secret(strings.TrimPrefix(string(testSecretC), "whsec_"))
	ok := func(c Config) Config {
		if c.Name == "" {
			c.Name = "billing"
		}
		if c.URL == "" {
			c.URL = "https://billing.example/hooks"
		}
		if c.Secret == "" && c.Secrets == nil && c.SecretFile == "" {
			c.Secret = testSecretA
		}
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // in the error
	}{
		{"no name", Config{URL: "https://x.example", Secret: testSecretA}, `name ""`},
		{"bad name", ok(Config{Name: "Billing"}), `name "Billing": byte 'B'`},
		{"long name", ok(Config{Name: strings.Repeat("a", 65)}), "must be 1 to 64 bytes"},
		{"reserved name", ok(Config{Name: "realtime"}), `name "realtime" is reserved`},
		{"no url", Config{Name: "b", URL: "", Secret: testSecretA}, "url is empty"},
		{"url unparsable", ok(Config{URL: "https://bad host/"}), "url: not a valid URL"},
		{"url scheme", ok(Config{URL: "ftp://x.example/"}), `scheme "ftp": must be https or http`},
		{"url relative", ok(Config{URL: "/hooks"}), "must be https or http"},
		{"url no host", ok(Config{URL: "https:///hooks"}), "has no host"},
		{"url user info", ok(Config{URL: "https://user:hunter2@x.example/"}), "must not hold user info"},
		{"url fragment", ok(Config{URL: "https://x.example/#f"}), "must not have a fragment"},
		{"url port", ok(Config{URL: "https://x.example:70000/"}), "port 70000"},
		{"no secret", Config{Name: "b", URL: "https://x.example"}, "no signing secret: set secret, secrets or secret_file"},
		{"two kinds", ok(Config{Secret: testSecretA, SecretFile: "/x"}), "set only one of secret, secrets and secret_file"},
		{"secret short", ok(Config{Secret: short}), "secret: webhook: invalid secret: decodes to 9 bytes; want 24 to 64"},
		{"secret not base64", ok(Config{Secret: notB64}), "secret: webhook: invalid secret: the part after \"whsec_\" holds a byte that is not standard base64"},
		{"secret no prefix", ok(Config{Secret: noPrefix}), `secret: webhook: invalid secret: does not start with "whsec_"`},
		{"secrets bad", ok(Config{Secrets: []Secret{testSecretA, noPrefix}}), `secrets[1]: webhook: invalid secret: does not start with "whsec_"`},
		{"secrets empty", ok(Config{Secrets: []Secret{}}), "secrets: 0 secrets; want 1 to 10"},
		{"secrets many", ok(Config{Secrets: make([]Secret, 11)}), "secrets: 11 secrets; want 1 to 10"},
		{"secret_file missing", ok(Config{SecretFile: filepath.Join(dir, "nope")}), "secret_file " + filepath.Join(dir, "nope") + ": no such file or directory"},
		{"secret_file empty", ok(Config{SecretFile: write("empty", "# only a comment\n\n")}), "holds no secret"},
		{"secret_file bad line", ok(Config{SecretFile: write("bad", string(testSecretA)+"\n\n"+string(notB64)+"\n")}), "bad: line 3: webhook: invalid secret"},
		{"timeout low", ok(Config{Timeout: time.Millisecond}), "timeout 1ms: must be between 10ms and 5m0s"},
		{"timeout negative", ok(Config{Timeout: -time.Second}), "timeout -1s"},
		{"max_in_flight", ok(Config{MaxInFlight: -1}), "max_in_flight -1: must be between 1 and 1024"},
		{"max_in_flight high", ok(Config{MaxInFlight: 5000}), "max_in_flight 5000"},
		{"claim_delay low", ok(Config{ClaimDelay: time.Microsecond}), "claim_delay 1µs: must be between 1ms and 1s"},
		{"claim_delay high", ok(Config{ClaimDelay: 2 * time.Second}), "claim_delay 2s"},
		{"batch_size", ok(Config{BatchSize: -1}), "batch_size -1: must be between 1 and 10000"},
		{"batch_size high", ok(Config{BatchSize: 10001}), "batch_size 10001"},
		{"max_attempts", ok(Config{MaxAttempts: 101}), "max_attempts 101: must be between 1 and 100"},
		{"max_age", ok(Config{MaxAge: 100 * 24 * time.Hour}), "max_age 2400h0m0s"},
		{"retry delays", ok(Config{RetryBaseDelay: time.Hour, RetryMaxDelay: time.Minute}), "retry_base_delay 1h0m0s, retry_max_delay 1m0s"},
		{"outage delays", ok(Config{OutageBaseDelay: -time.Second}), "outage_base_delay -1s"},
		{"retry_after_max", ok(Config{RetryAfterMax: -time.Second}), "retry_after_max -1s"},
		{"disable_after", ok(Config{DisableAfter: 1000 * 24 * time.Hour}), "disable_after 24000h0m0s"},
		{"ca_file on http", ok(Config{URL: "http://x.example/", CAFile: "/etc/ssl/ca.pem"}), "ca_file is set but url is not https"},
		{"ca_file missing", ok(Config{CAFile: filepath.Join(dir, "ca-nope")}), "ca_file " + filepath.Join(dir, "ca-nope") + ": no such file"},
		{"ca_file not pem", ok(Config{CAFile: write("ca.txt", "not a certificate")}), "holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(tc.cfg)
			if err == nil {
				e.Close()
				t.Fatalf("New accepted %+v", tc.cfg)
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q; want it to hold %q", err, tc.want)
			}
			if tc.cfg.Name != "" && !strings.HasPrefix(tc.cfg.Name, "Billing") && tc.cfg.Name != "realtime" && len(tc.cfg.Name) <= 64 &&
				!strings.Contains(err.Error(), `handler "`+tc.cfg.Name+`"`) {
				t.Fatalf("error %q does not name the handler", err)
			}
			noSecret(t, "the error", err.Error())
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error %q holds the url's password", err)
			}
		})
	}
}

// secret_file: one secret per line, comments and blank lines ignored, CRLF
// and surrounding spaces tolerated; both secrets sign.
func TestSecretFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "billing.whsec")
	content := "# billing, rotated 2025-03-01\r\n  " + string(testSecretB) + "  \r\n\n" + string(testSecretA) + "\n"
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t, nil)
	cfg := testConfig(rc.URL)
	cfg.Secret, cfg.SecretFile = "", p
	e := newEndpoint(t, cfg)
	wantClass(t, deliver(t, e, testMessage("m-file")), ClassDelivered, ReasonAccepted)
	r := rc.got()[0]
	for _, s := range []Secret{testSecretA, testSecretB} {
		if err := verifyWebhook([]string{string(s)}, r.Header, r.Body, time.Now()); err != nil {
			t.Fatalf("a receiver knowing one of the file's secrets refused: %v", err)
		}
	}
}

// TLS is verified: an endpoint whose certificate the system does not
// trust is an outage; with its CA as ca_file it delivers, over HTTP/2 when
// offered.
func TestTLSCustomCA(t *testing.T) {
	rc := newTLSReceiver(t, nil)
	cfg := testConfig(rc.URL)
	e := newEndpoint(t, cfg)
	r := deliver(t, e, testMessage("m-tls"))
	wantClass(t, r, ClassOutage, ReasonTLS)
	if !strings.Contains(r.Err.Error(), "certificate") {
		t.Fatalf("err %v", r.Err)
	}

	caFile := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rc.Certificate().Raw})
	if err := os.WriteFile(caFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.CAFile = caFile
	e = newEndpoint(t, cfg)
	for range 5 {
		wantClass(t, deliver(t, e, testMessage("m-tls")), ClassDelivered, ReasonAccepted)
	}
	got := rc.got()
	if len(got) != 5 || got[0].Proto != "HTTP/2.0" {
		t.Fatalf("%d requests, first over %q; want 5 over HTTP/2.0", len(got), got[0].Proto)
	}
	// One TLS connection failed verification; the five deliveries shared one.
	if n := rc.conns.Load(); n != 2 {
		t.Fatalf("%d connections; want 2 (the refused one, then one reused)", n)
	}
}
