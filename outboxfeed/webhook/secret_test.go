package webhook

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// Fixed test secrets: 32 random bytes each. Their base64 parts are
// distinctive, so a test can look for them in any output.
const (
	testSecretA Secret = "whsec_Nm8b7X2m0qkq3v9sQ8pZkR4y1WcT6hJd5LaE2uFgYiM="
	testSecretB Secret = "whsec_q2Hn4cX8bV1zR7tY0uKm3sLp9wDf6gJe5aNi8oQhTkU="
	testSecretC Secret = "whsec_Zx5Cv8Bn2Mq4Wl7Ek1Rt9Yu3Io6Pa0Sd5Fg8Hj2Kl4E="
)

func TestParseSecret(t *testing.T) {
	key, err := ParseSecret(testSecretA)
	if err != nil || len(key) != 32 {
		t.Fatalf("ParseSecret = %d bytes, %v", len(key), err)
	}
	for _, n := range []int{MinSecretBytes, MaxSecretBytes} {
		s := Secret(SecretPrefix + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, n)))
		if _, err := ParseSecret(s); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
	for name, s := range map[string]Secret{
		"empty":        "",
		"prefix only":  "whsec_",
		"other prefix": "whsk_" + Secret(base64.StdEncoding.EncodeToString(make([]byte, 32))),
		"unpadded":     Secret(SecretPrefix + base64.RawStdEncoding.EncodeToString(make([]byte, 32))),
		"url alphabet": Secret(SecretPrefix + strings.ReplaceAll(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 33)), "+", "-")),
		"newline":      Secret(SecretPrefix + base64.StdEncoding.EncodeToString(make([]byte, 30))[:20] + "\n" + base64.StdEncoding.EncodeToString(make([]byte, 30))[20:]),
		"too short":    Secret(SecretPrefix + base64.StdEncoding.EncodeToString(make([]byte, MinSecretBytes-1))),
		"too long":     Secret(SecretPrefix + base64.StdEncoding.EncodeToString(make([]byte, MaxSecretBytes+1))),
		"space":        testSecretA + " ",
	} {
		if _, err := ParseSecret(s); !errors.Is(err, ErrInvalidSecret) {
			t.Errorf("%s: err %v", name, err)
		}
	}
	g, err := GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	if key, err := ParseSecret(g); err != nil || len(key) != 32 {
		t.Fatalf("GenerateSecret gave %d bytes, %v", len(key), err)
	}
}

// A secret appears in no formatting of a Config, an Endpoint, a Signer or
// a Result, nor in any log line, whatever the verb or the encoder.
func TestSecretsNeverPrinted(t *testing.T) {
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", http.StatusBadRequest) })
	cfg := testConfig(rc.URL)
	cfg.Secret, cfg.Secrets = "", []Secret{testSecretA, testSecretB}
	e := newEndpoint(t, cfg)
	single := testConfig(rc.URL)
	single.Secret = testSecretC
	res := deliver(t, e, testMessage("m-redact"))
	refused := newEndpoint(t, Config{Name: "x", URL: "http://127.0.0.1:9/", Secret: testSecretC})
	resRefused := deliver(t, refused, testMessage("m-redact"))

	var out bytes.Buffer
	values := []any{cfg, &cfg, single, e, e.Config(), res, resRefused, testSecretA, cfg.Secrets, e.signer}
	for _, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
			fmt.Fprintf(&out, verb+"\n", v)
		}
		j, err := json.Marshal(v)
		if err == nil {
			out.Write(j)
		}
		slog.New(slog.NewTextHandler(&out, nil)).Info("value", "v", v, "secret", testSecretB)
		slog.New(slog.NewJSONHandler(&out, nil)).Info("value", "v", v, "secret", testSecretB)
	}
	out.WriteString(res.Err.Error())
	out.WriteString(resRefused.Err.Error())
	noSecret(t, "the output", out.String())
	if !strings.Contains(out.String(), "whsec_[REDACTED]") {
		t.Fatal("no redaction marker in the output: the values were not printed")
	}
	for _, s := range []Secret{testSecretA, testSecretB} {
		if b, _ := s.MarshalText(); string(b) != "whsec_[REDACTED]" {
			t.Fatalf("MarshalText = %q", b)
		}
	}
}

// ParseSecret's errors come from a fixed set of messages: no part of the
// input can be in them.
var secretErrorRE = regexp.MustCompile(`^webhook: invalid secret: (does not start with "whsec_"|nothing after "whsec_"|` +
	`the part after "whsec_" holds a byte that is not standard base64 \(A–Z a–z 0–9 \+ / =\) at offset [0-9]+|` +
	`the part after "whsec_" is not padded standard base64|decodes to [0-9]+ bytes; want 24 to 64)$`)

func FuzzParseSecret(f *testing.F) {
	for _, s := range []string{string(testSecretA), "whsec_", "", "whsec_AAAA", "whsec_====", "whsec_" + strings.Repeat("A", 200),
		"whsec_Nm8b7X2m0qkq3v9sQ8pZkR4y1WcT6hJd5LaE2uFgYiN=", "whsec_Nm8b7X2m0qkq3v9sQ8pZkR4y1WcT6hJd5LaE2uFgYiM", "whsec_\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		key, err := ParseSecret(Secret(s))
		if err != nil {
			if !errors.Is(err, ErrInvalidSecret) || !secretErrorRE.MatchString(err.Error()) {
				t.Fatalf("ParseSecret(%q): error %q outside the fixed set", s, err)
			}
			return
		}
		if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
			t.Fatalf("ParseSecret(%q) = %d bytes", s, len(key))
		}
		// Exactly one spelling per key.
		if again := SecretPrefix + base64.StdEncoding.EncodeToString(key); again != s {
			t.Fatalf("ParseSecret(%q) accepted a spelling of %q", s, again)
		}
	})
}

var secretFileErrorRE = regexp.MustCompile(`^(line [0-9]+: (more than 10 secrets|` + strings.TrimSuffix(strings.TrimPrefix(secretErrorRE.String(), "^"), "$") + `)|holds no secret \(one whsec_… per line\))$`)

func FuzzSecretFile(f *testing.F) {
	for _, s := range []string{
		string(testSecretA) + "\n" + string(testSecretB) + "\n",
		"# c\n\n  " + string(testSecretA) + "\r\n",
		"", "\n\n", "#", "whsec_x\n", strings.Repeat(string(testSecretA)+"\n", 11),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		secrets, err := parseSecretFile(content)
		if err != nil {
			if !secretFileErrorRE.MatchString(err.Error()) {
				t.Fatalf("error %q outside the fixed set", err)
			}
			return
		}
		if len(secrets) < 1 || len(secrets) > MaxSecrets {
			t.Fatalf("%d secrets", len(secrets))
		}
		for _, s := range secrets {
			if _, err := ParseSecret(s); err != nil {
				t.Fatalf("returned an invalid secret: %v", err)
			}
			if !bytes.Contains(content, []byte(s)) {
				t.Fatal("returned a secret that is not in the file")
			}
		}
		if _, err := NewSigner(secrets...); err != nil {
			t.Fatalf("NewSigner: %v", err)
		}
	})
}

// secretParts are the base64 parts of the test secrets, for leak checks.
func secretParts() []string {
	var out []string
	for _, s := range []Secret{testSecretA, testSecretB, testSecretC} {
		out = append(out, strings.TrimPrefix(string(s), SecretPrefix))
	}
	return out
}

// noSecret fails the test if out holds any test secret or a long piece of
// one.
func noSecret(t *testing.T, what, out string) {
	t.Helper()
	for _, p := range secretParts() {
		for i := 0; i+12 <= len(p); i += 4 {
			if j := strings.Index(out, p[i:i+12]); j >= 0 {
				t.Fatalf("%s holds a piece of a secret: …%q…", what, out[max(0, j-200):min(len(out), j+100)])
			}
		}
	}
}
