package gateway

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/heraldgw/herald/gateway/internal/session"
	"github.com/heraldgw/herald/gateway/internal/ws"
)

var updateVocabulary = flag.Bool("update", false, "rewrite the generated tables of docs/protocol.md and clientjs/test/vocabulary.json")

const (
	protocolDoc       = "../docs/protocol.md"
	metricsDoc        = "../docs/metrics.md"
	vocabularyFixture = "../clientjs/test/vocabulary.json"
)

// TestVocabularyDocs checks that docs/protocol.md's disconnect-reason and
// error-code tables are the ones the Reasons and ws.Errors tables yield
// (-update rewrites them), and that docs/metrics.md names every reason as
// a label value.
func TestVocabularyDocs(t *testing.T) {
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	got := string(doc)
	for _, g := range []struct{ name, table string }{
		{"reasons", reasonTable()},
		{"error-codes", errorCodeTable()},
		{"recovery-reasons", recoveryReasonTable()},
	} {
		got = replaceGenerated(t, got, g.name, g.table)
	}
	if got != string(doc) {
		if *updateVocabulary {
			if err := os.WriteFile(protocolDoc, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Errorf("docs/protocol.md's generated tables are out of date: run go test ./gateway -run TestVocabularyDocs -update")
		}
	}

	metrics, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`herald_disconnects_total`[^\n]*the typed close reasons: ([^)]*)\\)").FindSubmatchIndex(metrics)
	if m == nil {
		t.Fatal("docs/metrics.md: no reason list in the herald_disconnects_total row")
	}
	var listed []string
	for _, c := range regexp.MustCompile("`([a-z_]+)`").FindAllSubmatch(metrics[m[2]:m[3]], -1) {
		listed = append(listed, string(c[1]))
	}
	var codes []string
	for _, r := range session.Reasons {
		codes = append(codes, r.Code)
	}
	if !slices.Equal(listed, codes) && *updateVocabulary {
		list := "`" + strings.Join(codes, "`, `") + "`"
		metrics = slices.Concat(metrics[:m[2]], []byte(list), metrics[m[3]:])
		if err := os.WriteFile(metricsDoc, metrics, 0o644); err != nil {
			t.Fatal(err)
		}
	} else if !slices.Equal(listed, codes) {
		t.Errorf("docs/metrics.md lists the reasons\n%v\nwant (session.Reasons, in order)\n%v\nrun go test ./gateway -run TestVocabularyDocs -update", listed, codes)
	}
}

// TestVocabularyFixture checks the JSON fixture the JS client's tests read
// (-update rewrites it).
func TestVocabularyFixture(t *testing.T) {
	want := vocabularyJSON(t)
	got, err := os.ReadFile(vocabularyFixture)
	if *updateVocabulary {
		if err := os.WriteFile(vocabularyFixture, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("clientjs/test/vocabulary.json is out of date (%v): run go test ./gateway -run TestVocabulary -update", err)
	}
}

// TestVocabularyTable checks the Reasons table itself: unique codes and
// close codes, every reason documented, each close code in the range that
// says what the client does.
func TestVocabularyTable(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range session.Reasons {
		if seen[r.Code] || !regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`).MatchString(r.Code) {
			t.Errorf("reason %q: duplicate or not snake_case", r.Code)
		}
		seen[r.Code] = true
		if r.Message == "" || session.DocOf(r).Advice == "" || session.DocOf(r).SSE == "" {
			t.Errorf("reason %s: message, advice and SSE column are required", r.Code)
		}
		if r.Close == 0 && r.Code != session.ReasonClientClosed.Code {
			t.Errorf("reason %s has no close code", r.Code)
		}
	}
	for _, r := range session.RecoveryReasons {
		if seen[r.Code] || r.Doc == "" || !regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`).MatchString(r.Code) {
			t.Errorf("recovery reason %q: a reason code already, undocumented or not snake_case", r.Code)
		}
		seen[r.Code] = true
	}
	errs := map[string]bool{}
	for _, e := range ws.Errors {
		if errs[e.Code] || e.Meaning == "" {
			t.Errorf("error code %q: duplicate or undocumented", e.Code)
		}
		errs[e.Code] = true
	}
}

// replaceGenerated replaces what lies between the markers of the generated
// block name in doc with table.
func replaceGenerated(t *testing.T, doc, name, table string) string {
	t.Helper()
	begin := fmt.Sprintf("<!-- generated: %s (go test ./gateway -run TestVocabularyDocs -update) -->\n", name)
	const end = "<!-- end of generated table -->"
	i := strings.Index(doc, begin)
	if i < 0 {
		t.Fatalf("docs/protocol.md has no %q marker", strings.TrimSpace(begin))
	}
	j := strings.Index(doc[i:], end)
	if j < 0 {
		t.Fatalf("docs/protocol.md: the %s block has no end marker", name)
	}
	return doc[:i+len(begin)] + table + doc[i+j:]
}

func reasonTable() string {
	var b strings.Builder
	b.WriteString("| reason | reconnect? | SSE (refused request / in-stream) | WS close code | what the client does |\n|---|---|---|---|---|\n")
	for _, r := range session.Reasons {
		reconnect := session.DocOf(r).Reconnect
		if reconnect == "" {
			reconnect = map[bool]string{true: "yes", false: "no"}[r.Reconnect]
		}
		closeCol := session.DocOf(r).Close
		if closeCol == "" {
			closeCol = strconv.Itoa(int(r.Close))
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", r.Code, reconnect, session.DocOf(r).SSE, closeCol, session.DocOf(r).Advice)
	}
	return b.String()
}

func recoveryReasonTable() string {
	var b strings.Builder
	b.WriteString("| reason | meaning |\n|---|---|\n")
	for _, r := range session.RecoveryReasons {
		fmt.Fprintf(&b, "| `%s` | %s |\n", r.Code, r.Doc)
	}
	return b.String()
}

func errorCodeTable() string {
	var b strings.Builder
	b.WriteString("| code | temporary | meaning |\n|---|---|---|\n")
	for _, e := range ws.Errors {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", e.Code, map[bool]string{true: "yes", false: "no"}[e.Temporary], e.Meaning)
	}
	return b.String()
}

// vocabularyJSON is the fixture: what a client must know of each reason,
// close-code range, error code and op.
func vocabularyJSON(t *testing.T) []byte {
	type reason struct {
		Code      string `json:"code"`
		Reconnect bool   `json:"reconnect"`
		Status    int    `json:"status,omitempty"`
		Close     int    `json:"close,omitempty"`
	}
	type errorCode struct {
		Code      string `json:"code"`
		Temporary bool   `json:"temporary"`
	}
	type closeRange struct {
		From   int    `json:"from"`
		To     int    `json:"to"`
		Action string `json:"action"`
	}
	v := struct {
		Protocol        string       `json:"protocol"`
		Reasons         []reason     `json:"reasons"`
		CloseRanges     []closeRange `json:"close_ranges"`
		ErrorCodes      []errorCode  `json:"error_codes"`
		Ops             []string     `json:"ops"`
		RecoveryReasons []string     `json:"recovery_reasons"`
	}{
		Protocol: ws.Protocol,
		CloseRanges: []closeRange{
			{4000, 4099, "reconnect"}, {4100, 4199, "reauth"}, {4500, 4599, "stop"},
		},
	}
	for _, op := range ws.OpTable {
		v.Ops = append(v.Ops, op.Name)
	}
	for _, r := range session.Reasons {
		v.Reasons = append(v.Reasons, reason{r.Code, r.Reconnect, r.Status, int(r.Close)})
	}
	for _, e := range ws.Errors {
		v.ErrorCodes = append(v.ErrorCodes, errorCode{e.Code, e.Temporary})
	}
	for _, r := range session.RecoveryReasons {
		v.RecoveryReasons = append(v.RecoveryReasons, r.Code)
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}
