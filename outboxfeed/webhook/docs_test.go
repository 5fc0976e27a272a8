package webhook

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/internal/durations"
)

// docsPath is the receivers' contract.
const docsPath = "../../docs/handlers.md"

func readDocs(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// codeBlocks returns the fenced code blocks of doc in the given language.
func codeBlocks(doc, lang string) []string {
	var out []string
	var cur *strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case cur == nil && line == "```"+lang:
			cur = new(strings.Builder)
		case cur != nil && line == "```":
			out = append(out, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return out
}

// The Go snippet of the docs is, word for word, the verifier the tests
// check every signature with.
func TestDocsGoSnippetIsTheVerifier(t *testing.T) {
	src, err := os.ReadFile("verify_test.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	begin, end := strings.Index(s, "// BEGIN verifyWebhook\n"), strings.Index(s, "// END verifyWebhook")
	if begin < 0 || end < begin {
		t.Fatal("verify_test.go has no BEGIN/END verifyWebhook markers")
	}
	code := strings.TrimSpace(s[begin+len("// BEGIN verifyWebhook\n") : end])
	for _, block := range codeBlocks(readDocs(t), "go") {
		if strings.HasPrefix(block, "// verifyWebhook") {
			if strings.TrimSpace(block) != code {
				t.Fatalf("docs/handlers.md's verifyWebhook differs from verify_test.go's:\n%s", block)
			}
			return
		}
	}
	t.Fatal("docs/handlers.md has no Go verifyWebhook block")
}

// The example request of the docs is what Herald sends for that record at
// that second with that secret.
func TestDocsExampleRequest(t *testing.T) {
	doc := readDocs(t)
	m := testMessage("0f8fad5b-d9cb-469f-a165-70867728950e")
	m.Channel = "billing/invoices"
	body, err := AppendBody(nil, &m)
	if err != nil {
		t.Fatal(err)
	}
	const secret, ts = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1740824130
	s, err := NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	sig := s.Sign(m.ID, ts, body)
	for _, want := range []string{
		"\n    " + string(body) + "\n",
		"webhook-id: " + m.ID + "\n",
		"webhook-timestamp: " + strconv.Itoa(ts) + "\n",
		"webhook-signature: " + sig + "\n",
		"`" + secret + "`",
	} {
		if !strings.Contains(doc, want) {
			t.Fatalf("docs/handlers.md lacks %q", want)
		}
	}
	h := http.Header{}
	h.Set("webhook-id", m.ID)
	h.Set("webhook-timestamp", strconv.Itoa(ts))
	h.Set("webhook-signature", sig)
	if err := verifyWebhook([]string{secret}, h, body, time.Unix(ts, 0)); err != nil {
		t.Fatal(err)
	}
}

// tableRow reports whether doc has a table row holding every cell.
func tableRow(doc string, cells ...string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		all := true
		for _, c := range cells {
			if !strings.Contains(line, c) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func TestDocsResponseTable(t *testing.T) {
	doc := readDocs(t)
	for r, c := range Reasons {
		if !tableRow(doc, "| `"+c.String()+"` | `"+string(r)+"` |") {
			t.Errorf("docs/handlers.md has no response row for class %s, reason %s", c, r)
		}
	}
}

func TestDocsScheduleTables(t *testing.T) {
	doc := readDocs(t)
	s := Config{}.Schedule()
	var sum time.Duration
	for n := 1; n < s.MaxAttempts; n++ {
		c := s.RetryCeiling(n)
		sum += c
		row := fmt.Sprintf("| %d | %s | %s |", n, durations.Short(c), durations.Short(sum))
		if !tableRow(doc, row) {
			t.Errorf("docs/handlers.md lacks the retry row %q", row)
		}
	}
	for f := 1; f <= 10; f++ {
		c := s.OutageCeiling(f)
		n := strconv.Itoa(f)
		if f == 10 {
			n = "10 and more"
		}
		lo := durations.Short(c / 2)
		if c/2 < time.Second {
			lo = fmt.Sprintf("%gs", (c / 2).Seconds())
		}
		row := fmt.Sprintf("| %s | %s and %s |", n, lo, durations.Short(c))
		if !tableRow(doc, row) {
			t.Errorf("docs/handlers.md lacks the outage row %q", row)
		}
	}
	if s.OutageCeiling(11) != s.OutageCeiling(10) {
		t.Error("the outage ceiling still grows after 10")
	}
}

// Every key of Config is in the settings table, with its default.
func TestDocsSettings(t *testing.T) {
	doc := readDocs(t)
	def := reflect.ValueOf(Config{}.WithDefaults())
	typ := def.Type()
	for i := range typ.NumField() {
		key := typ.Field(i).Tag.Get("yaml")
		if key == "" {
			t.Fatalf("field %s has no yaml key", typ.Field(i).Name)
		}
		var want string
		switch v := def.Field(i).Interface().(type) {
		case time.Duration:
			want = "`" + durations.Short(v) + "`"
		case int:
			want = "`" + strconv.Itoa(v) + "`"
		case bool:
			want = "`" + strconv.FormatBool(v) + "`"
		default:
			want = "|"
		}
		if !tableRow(doc, "| `"+key+"` | ", want) {
			t.Errorf("docs/handlers.md's settings table lacks `%s` with default %s", key, want)
		}
	}
}

func TestDocsSSRFTable(t *testing.T) {
	doc := readDocs(t)
	for _, r := range specialRanges {
		if !tableRow(doc, "`"+r.prefix.String()+"`") {
			t.Errorf("docs/handlers.md's SSRF table lacks %s", r.prefix)
		}
	}
}

// The Node.js and the Python receivers of the docs accept Herald's
// requests during a rotation (they know only the new secret) and refuse a
// wrong secret and a stale timestamp.
func TestDocsSnippetReceivers(t *testing.T) {
	for _, tc := range []struct {
		lang, name, interpreter, install, file, blocks string
	}{
		{"js", "Node.js", "node", "Install Node.js 18 or later (`apt-get install nodejs`)", "receiver.js", "verifyWebhook, the receiver"},
		{"python", "Python", "python3", "Install Python 3.9 or later (`apt-get install python3`)", "receiver.py", "verify_webhook, the receiver"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			interpreter, err := exec.LookPath(tc.interpreter)
			if err != nil {
				t.Fatalf("%s not found in PATH (%v): the %s snippet of docs/handlers.md cannot be checked. %s", tc.interpreter, err, tc.name, tc.install)
			}
			code := codeBlocks(readDocs(t), tc.lang)
			if len(code) != 2 {
				t.Fatalf("docs/handlers.md has %d %s blocks; want 2 (%s)", len(code), tc.lang, tc.blocks)
			}
			file := filepath.Join(t.TempDir(), tc.file)
			if err := os.WriteFile(file, []byte(code[0]+"\n"+code[1]), 0o600); err != nil {
				t.Fatal(err)
			}
			checkSnippetReceiver(t, exec.Command(interpreter, file))
		})
	}
}

// checkSnippetReceiver runs a receiver that prints "listening on PORT"
// and "received TYPE ID" per accepted record, and checks it against
// Herald's requests.
func checkSnippetReceiver(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.Env = append(os.Environ(), "PORT=0", "WEBHOOK_SECRETS="+string(testSecretB))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-readDone
		_ = cmd.Wait()
	})
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the receiver exited: %s", stderr.String())
			}
			return l
		case <-time.After(time.Minute):
			t.Fatalf("no line from the receiver in a minute: %s", stderr.String())
		}
		return ""
	}
	port, ok := strings.CutPrefix(next(), "listening on ")
	if !ok {
		t.Fatalf("the receiver's first line is not \"listening on PORT\"")
	}
	url := "http://127.0.0.1:" + strings.TrimSpace(port) + "/hooks/herald"

	// A rotation: Herald signs with the old and the new secret.
	cfg := testConfig(url)
	cfg.Secret, cfg.Secrets = "", []Secret{testSecretA, testSecretB}
	e := newEndpoint(t, cfg)
	for i := range 3 {
		m := testMessage(fmt.Sprintf("msg-%d", i))
		m.Data = json.RawMessage(`{"note":"é \u2028 \"quoted\""}`)
		wantClass(t, deliver(t, e, m), ClassDelivered, ReasonAccepted)
		if l := next(); l != "received invoice.paid "+m.ID {
			t.Fatalf("receiver printed %q", l)
		}
	}

	// A secret the receiver does not know.
	cfg.Secrets = []Secret{testSecretC}
	r := deliver(t, newEndpoint(t, cfg), testMessage("msg-wrong"))
	wantClass(t, r, ClassPermanent, ReasonClientError)
	if r.Status != http.StatusUnauthorized || !strings.Contains(r.Err.Error(), "no valid signature") {
		t.Fatalf("wrong secret: %v", r.Err)
	}

	// A correct signature on a request ten minutes old.
	m := testMessage("msg-stale")
	body, _ := AppendBody(nil, &m)
	signer, _ := NewSigner(testSecretB)
	ts := time.Now().Add(-10 * time.Minute).Unix()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("webhook-id", m.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", signer.Sign(m.ID, ts, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a stale request got %d", resp.StatusCode)
	}
}
