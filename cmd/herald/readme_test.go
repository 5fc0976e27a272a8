package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/gateway"
	"github.com/heraldgw/herald/internal/testenv"
)

// TestREADME runs the ```sh blocks of README sections with bash, as a user
// would type them, one section after the other in one directory that
// stands in for the repository root (bin/herald, ./herald-data/), and
// checks what each section promises.
//
// What the test changes in the README's commands, and nothing else:
//   - the value of `export HERALD_DATABASE_URL=…` becomes a fresh database
//     of the test PostgreSQL, and that of `export HERALD_REDIS_URL=…` the
//     test Redis; the shells' environment has HERALD_REDIS_KEY_PREFIX set
//     to a prefix of this test's own;
//   - each loopback address 127.0.0.1:PORT becomes a free port (the same
//     one wherever PORT appears); a serve that relies on the default
//     127.0.0.1:8080 gets that port through HERALD_LISTEN;
//   - a long-running command (herald serve or feed, curl -N, or a line
//     ending in &) runs in the background with its stdout in a file of its
//     own and its PID reported to the test, which stops it.
//
// bash runs with -e and -u: a failing command or an undefined variable
// fails the test. `make run` is replaced by the `bin/herald serve` it runs;
// its behaviour is TestServeWithDefaults's.
func TestREADME(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(buildHerald(t), filepath.Join(root, "bin", "herald")); err != nil {
		t.Fatal(err)
	}
	redisURL, prefix := testenv.Redis(t)
	sub := &readmeSubst{
		exports: map[string]string{"HERALD_DATABASE_URL": testenv.DatabaseURL(t), "HERALD_REDIS_URL": redisURL},
		ports:   map[string]string{},
	}
	defaultAddr := sub.loopback(t, gateway.DefaultListen) // where make run listens
	live := readmeSection(t, readme, "See a live stream", 2, 0)

	t.Run("See a live stream", func(t *testing.T) {
		node := startStandIn(t, root, "serve", "--listen", defaultAddr) // make run
		waitReady(t, node)

		second := startShell(t, root, testenv.HeraldEnv(), "second terminal")
		curl := second.run(t, sub.apply(t, live.sh[0])).only(t, "curl -N")
		waitSubscribed(t, curl)

		third := startShell(t, root, testenv.HeraldEnv(), "third terminal")
		id := publishedID(t, third.run(t, sub.apply(t, live.sh[1])).stdout)
		e := waitPublication(t, curl, func(e fanout.Publication) bool { return e.ID == id })
		checkEnvelope(t, e, "orders/1", "order.updated", 1, `{"status":"paid"}`)
	})

	t.Run("With PostgreSQL", func(t *testing.T) {
		pg := readmeSection(t, readme, "With PostgreSQL", 1, 1)
		sh := startShell(t, root, append(testenv.HeraldEnv(), "HERALD_LISTEN="+defaultAddr), "terminal")
		node := sh.run(t, sub.apply(t, pg.sh[0], "HERALD_DATABASE_URL")).only(t, "herald serve")
		base, banner := waitListening(t, node)
		if !strings.Contains(banner, "store: PostgreSQL") {
			t.Fatalf("the node does not use HERALD_DATABASE_URL: %s", banner)
		}
		waitReady(t, base)

		// The commands of "See a live stream", in this terminal.
		curl := sh.run(t, sub.apply(t, live.sh[0])).only(t, "curl -N")
		waitSubscribed(t, curl)
		id := publishedID(t, sh.run(t, sub.apply(t, live.sh[1])).stdout)
		e := waitPublication(t, curl, func(e fanout.Publication) bool { return e.ID == id })
		checkEnvelope(t, e, "orders/1", "order.updated", 1, `{"status":"paid"}`)

		// The SQL a producer runs, as written, in the database the node
		// migrated and nothing else: it makes its own orders table.
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, sub.exports["HERALD_DATABASE_URL"])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, pg.sql[0]); err != nil { // no arguments: the simple protocol, several statements
			t.Fatalf("the README's SQL: %v\n%s", err, pg.sql[0])
		}
		e = waitPublication(t, curl, func(e fanout.Publication) bool { return e.ID != id })
		checkEnvelope(t, e, "orders/1", "order.updated", 1, `{"status":"paid"}`)
		var status string
		if err := conn.QueryRow(ctx, `SELECT status FROM orders WHERE id = 1`).Scan(&status); err != nil || status != "paid" {
			t.Fatalf("the business change: status %q, %v", status, err)
		}
	})

	t.Run("Many nodes", func(t *testing.T) {
		many := readmeSection(t, readme, "Many nodes", 3, 0)
		sh := startShell(t, root, append(testenv.HeraldEnv(), "HERALD_REDIS_KEY_PREFIX="+prefix), "terminal")
		procs := sh.run(t, sub.apply(t, many.sh[0], "HERALD_DATABASE_URL", "HERALD_REDIS_URL")).bg
		nodes := map[string]*bgProc{} // serve nodes by listen address
		for _, p := range procs {
			base, banner := waitListening(t, p)
			if !strings.Contains(banner, "broker: redis") {
				t.Fatalf("%s does not use HERALD_REDIS_URL: %s", p.line, banner)
			}
			if strings.Contains(p.line, "herald serve") {
				if !strings.Contains(banner, "store: PostgreSQL") {
					t.Fatalf("%s does not use HERALD_DATABASE_URL: %s", p.line, banner)
				}
				nodes[strings.TrimPrefix(base, "http://")] = p
			}
			waitReady(t, base)
		}
		if len(nodes) < 2 {
			t.Fatalf("want at least two serve nodes, the section starts %d", len(nodes))
		}
		if s := sh.stderr(); strings.Contains(s, "DEVELOPMENT HMAC secret") {
			t.Fatalf("a node runs on a development secret of its own:\n%s", s)
		}

		curls := sh.run(t, sub.apply(t, many.sh[1])).all("curl -N")
		onEdge := false
		seen := map[*bgProc]bool{}
		for _, c := range curls {
			addr := loopbackRE.FindString(c.line)
			node := nodes[addr]
			if node == nil {
				t.Fatalf("%s: no node of the section listens on %q", c.line, addr)
			}
			seen[node] = true
			onEdge = onEdge || strings.Contains(node.line, "--feed=false")
			waitSubscribed(t, c) // the one token is accepted here
		}
		if len(seen) < 2 || !onEdge {
			t.Fatalf("want streams on two nodes, one of them an edge node (--feed=false): %d nodes, edge %v", len(seen), onEdge)
		}
		for addr := range nodes { // and a token of another secret is not
			if s := openSSE(t, "http://"+addr+"/v1/sse?channel=orders/1", mint(t, "acme", "u1", "orders/*"), ""); s.Status != http.StatusUnauthorized {
				t.Fatalf("node %s accepts a token of another secret: %d", addr, s.Status)
			}
		}

		id := publishedID(t, sh.run(t, sub.apply(t, many.sh[2])).stdout)
		for _, c := range curls {
			e := waitPublication(t, c, func(e fanout.Publication) bool { return e.ID == id })
			checkEnvelope(t, e, "orders/1", "order.updated", 1, `{"status":"shipped"}`)
		}
	})
}

// readmeBlocks are the fenced blocks of one README section.
type readmeBlocks struct{ sh, sql []string }

var headingRE = regexp.MustCompile(`^(#+)\s+(.+?)\s*$`)

// readmeSection returns the sh and sql blocks of the section titled title
// (up to the next heading of its level or above), failing unless it has the
// number of each the test expects.
func readmeSection(t *testing.T, readme, title string, wantSh, wantSQL int) readmeBlocks {
	t.Helper()
	var (
		b             readmeBlocks
		level         int // of the section; 0 = not in it
		found, fenced bool
		lang          string
		block         []string
	)
	for _, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(line, "```") {
			if !fenced {
				fenced, lang, block = true, strings.TrimSpace(strings.TrimPrefix(line, "```")), nil
				continue
			}
			fenced = false
			if level > 0 {
				switch lang {
				case "sh":
					b.sh = append(b.sh, strings.Join(block, "\n")+"\n")
				case "sql":
					b.sql = append(b.sql, strings.Join(block, "\n")+"\n")
				}
			}
			continue
		}
		if fenced {
			block = append(block, line)
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			switch {
			case m[2] == title:
				level, found = len(m[1]), true
			case level > 0 && len(m[1]) <= level:
				level = 0
			}
		}
	}
	if !found {
		t.Fatalf("README has no section %q", title)
	}
	if len(b.sh) != wantSh || len(b.sql) != wantSQL {
		t.Fatalf("README section %q has %d sh and %d sql blocks; the test runs %d and %d", title, len(b.sh), len(b.sql), wantSh, wantSQL)
	}
	return b
}

// readmeSubst makes the substitutions the test needs, listed on TestREADME.
type readmeSubst struct {
	exports map[string]string // variable → the test's value
	ports   map[string]string // README port → free loopback address
}

var (
	loopbackRE = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	exportRE   = regexp.MustCompile(`(?m)^(\s*export\s+)([A-Z_]+)=.*$`)
)

// loopback returns the free address that stands in for addr.
func (s *readmeSubst) loopback(t *testing.T, addr string) string {
	t.Helper()
	if a, ok := s.ports[addr]; ok {
		return a
	}
	a := testenv.FreeAddr(t)
	s.ports[addr] = a
	return a
}

// apply substitutes block; each variable of mustExport must be exported
// there exactly once.
func (s *readmeSubst) apply(t *testing.T, block string, mustExport ...string) string {
	t.Helper()
	block = loopbackRE.ReplaceAllStringFunc(block, func(a string) string { return s.loopback(t, a) })
	count := map[string]int{}
	block = exportRE.ReplaceAllStringFunc(block, func(line string) string {
		m := exportRE.FindStringSubmatch(line)
		v, ok := s.exports[m[2]]
		if !ok {
			return line
		}
		count[m[2]]++
		return m[1] + m[2] + "=" + shellQuote(v)
	})
	for _, name := range mustExport {
		if count[name] != 1 {
			t.Fatalf("the block exports %s %d times, want once:\n%s", name, count[name], block)
		}
	}
	return block
}

// shell is one terminal: a bash reading the blocks from its stdin, its
// working directory the stand-in repository root. It reports on fd 3 the
// PIDs of the background commands and the end of each block.
type shell struct {
	name       string
	dir        string // for its output files
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	outPath    string
	errPath    string
	marks      chan string
	exited     chan struct{}
	mu         sync.Mutex
	bg         []*bgProc
	nextBg     int
	blocks     int
	stdoutSeen int
}

// bgProc is a command the test started in the background of a shell.
type bgProc struct {
	line string // as run, after substitution
	out  string // file with its stdout
	pid  int
}

var (
	longRunningRE   = regexp.MustCompile(`^(\S*herald\s+(serve|feed)|curl\s+-N)\b`)
	trailingComment = regexp.MustCompile(`\s+#[^'"]*$`)
)

func startShell(t *testing.T, root string, env []string, name string) *shell {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &shell{name: name, dir: t.TempDir(), marks: make(chan string, 16), exited: make(chan struct{})}
	s.outPath, s.errPath = filepath.Join(s.dir, "stdout"), filepath.Join(s.dir, "stderr")
	stdout, err := os.Create(s.outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(s.errPath)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	s.cmd = exec.Command("bash", "-eu", "-s")
	s.cmd.Dir, s.cmd.Env = root, env
	s.cmd.Stdout, s.cmd.Stderr, s.cmd.ExtraFiles = stdout, stderr, []*os.File{w}
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	err = s.cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		t.Fatal(err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	go func() { // until bash and every background command are gone
		defer r.Close()
		defer close(s.marks)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 3 && f[0] == "bg" {
				k, _ := strconv.Atoi(f[1])
				pid, _ := strconv.Atoi(f[2])
				s.mu.Lock()
				for _, p := range s.bg {
					if p.pid == 0 && p.out == s.bgOut(k) {
						p.pid = pid
					}
				}
				s.mu.Unlock()
				continue
			}
			s.marks <- sc.Text()
		}
	}()
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *shell) bgOut(k int) string { return filepath.Join(s.dir, fmt.Sprintf("bg%d.out", k)) }

// stop ends the background commands by PID, lets bash reap them and exit.
func (s *shell) stop(t *testing.T) {
	s.mu.Lock()
	bg := append([]*bgProc(nil), s.bg...)
	s.mu.Unlock()
	for _, p := range bg {
		if p.pid > 0 {
			_ = syscall.Kill(p.pid, syscall.SIGTERM)
		}
	}
	_, _ = io.WriteString(s.stdin, "wait\n")
	_ = s.stdin.Close()
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Errorf("%s: bash and its background commands did not stop within 30s of SIGTERM", s.name)
		for _, p := range bg {
			if p.pid > 0 {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	if t.Failed() {
		t.Logf("%s stderr:\n%s", s.name, s.stderr())
		for _, p := range bg {
			out, _ := os.ReadFile(p.out)
			t.Logf("%s: %s\n%s", s.name, p.line, out)
		}
	}
}

func (s *shell) stderr() string {
	b, _ := os.ReadFile(s.errPath)
	return string(b)
}

// blockResult is what one block printed and started.
type blockResult struct {
	stdout string
	bg     []*bgProc
}

// only returns the one background command that starts with prefix.
func (r blockResult) only(t *testing.T, prefix string) *bgProc {
	t.Helper()
	if all := r.all(prefix); len(all) == 1 {
		return all[0]
	}
	t.Fatalf("want one background %q command, the block started %d", prefix, len(r.all(prefix)))
	return nil
}

// all returns the background commands whose command is prefix (after a
// path to the binary).
func (r blockResult) all(prefix string) []*bgProc {
	var ps []*bgProc
	for _, p := range r.bg {
		if strings.HasPrefix(p.line, prefix) || strings.Contains(p.line, "/"+prefix) {
			ps = append(ps, p)
		}
	}
	return ps
}

// run types block into the shell and waits until bash has run it.
func (s *shell) run(t *testing.T, block string) blockResult {
	t.Helper()
	var script strings.Builder
	var started []*bgProc
	for _, line := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
		cmd := strings.TrimSpace(trailingComment.ReplaceAllString(line, ""))
		bg := strings.HasSuffix(cmd, "&") && !strings.HasSuffix(cmd, "&&")
		if !bg && !longRunningRE.MatchString(cmd) {
			script.WriteString(line + "\n")
			continue
		}
		cmd = strings.TrimSpace(strings.TrimSuffix(cmd, "&"))
		k := s.nextBg
		s.nextBg++
		p := &bgProc{line: cmd, out: s.bgOut(k)}
		started = append(started, p)
		fmt.Fprintf(&script, "%s >%s & echo \"bg %d $!\" >&3\n", cmd, shellQuote(p.out), k)
	}
	s.blocks++
	mark := fmt.Sprintf("block %d done", s.blocks)
	fmt.Fprintf(&script, "echo %q >&3\n", mark)
	s.mu.Lock()
	s.bg = append(s.bg, started...)
	s.mu.Unlock()
	if _, err := io.WriteString(s.stdin, script.String()); err != nil {
		t.Fatalf("%s: write to bash: %v\n%s", s.name, err, s.stderr())
	}
	timeout := time.After(60 * time.Second)
	for done := false; !done; {
		select {
		case m, ok := <-s.marks:
			done = ok && m == mark
			if !ok {
				<-s.exited
				t.Fatalf("%s: bash exited (%v) running\n%s\nstderr:\n%s", s.name, s.cmd.ProcessState, block, s.stderr())
			}
		case <-s.exited:
			t.Fatalf("%s: bash exited (%v) running\n%s\nstderr:\n%s", s.name, s.cmd.ProcessState, block, s.stderr())
		case <-timeout:
			t.Fatalf("%s: bash did not finish within 60s:\n%s\nstderr:\n%s", s.name, block, s.stderr())
		}
	}
	out, err := os.ReadFile(s.outPath)
	if err != nil {
		t.Fatal(err)
	}
	r := blockResult{stdout: string(out[s.stdoutSeen:]), bg: started}
	s.stdoutSeen = len(out)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range started {
		if p.pid == 0 {
			t.Fatalf("%s: no PID reported for %s", s.name, p.line)
		}
	}
	return r
}

// startStandIn runs bin/herald with args in root as a terminal would,
// stopped by PID (SIGTERM) when the test ends; it returns the base URL the
// node prints.
func startStandIn(t *testing.T, root string, args ...string) string {
	t.Helper()
	_, p, _ := spawn(t, root, filepath.Join("bin", "herald"), "bin/herald", true, args...)
	base, _ := waitListening(t, p)
	return base
}

var feedOpsRE = regexp.MustCompile(`running as \S+ \(broker: \S+, ops: (127\.0\.0\.1:\d+)\)`)

// waitListening waits until a serve or feed process prints its first line,
// once it listens, and returns its base URL and that line.
func waitListening(t *testing.T, p *bgProc) (base, banner string) {
	t.Helper()
	out := waitOutput(t, p, "banner", func(out string) bool { return strings.Contains(out, "\n") })
	banner, _, _ = strings.Cut(out, "\n")
	if m := listenRE.FindStringSubmatch(banner); m != nil {
		return m[1], banner
	}
	if m := feedOpsRE.FindStringSubmatch(banner); m != nil {
		return "http://" + m[1], banner
	}
	t.Fatalf("%s: no address in its first line %q", p.line, banner)
	return "", ""
}

// waitOutput polls p's output until ok accepts it (for at most 20s).
func waitOutput(t *testing.T, p *bgProc, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a failure bound, not a budget
	for {
		b, err := os.ReadFile(p.out)
		if err != nil && !os.IsNotExist(err) { // bash creates it as the command starts
			t.Fatal(err)
		}
		if ok(string(b)) {
			return string(b)
		}
		if p.pid > 0 && syscall.Kill(p.pid, 0) == syscall.ESRCH { // gone (bash reaped it)
			if b, _ = os.ReadFile(p.out); ok(string(b)) {
				return string(b)
			}
			t.Fatalf("%s exited before its %s; output:\n%s", p.line, what, b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %s within 2m; output:\n%s", p.line, what, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sseEvents parses the complete events of an SSE stream's text.
func sseEvents(text string) []sseEvent {
	var evs []sseEvent
	var ev sseEvent
	var data []string
	lines := strings.Split(text, "\n")
	for _, line := range lines[:len(lines)-1] { // the last is not complete
		line = strings.TrimSuffix(line, "\r")
		switch {
		case line == "":
			if len(data) > 0 || ev.Event != "" {
				ev.Data = strings.Join(data, "\n")
				evs = append(evs, ev)
			}
			ev, data = sseEvent{}, nil
		case strings.HasPrefix(line, "event:"):
			ev.Event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "id:"):
			ev.ID = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	return evs
}

// waitSubscribed waits for the subscribed event on a curl -N stream; a
// refusal (a JSON error body instead of events) fails at once.
func waitSubscribed(t *testing.T, curl *bgProc) {
	t.Helper()
	waitOutput(t, curl, "subscribed event", func(out string) bool {
		if strings.HasPrefix(out, "{") {
			t.Fatalf("%s was refused: %s", curl.line, out)
		}
		for _, ev := range sseEvents(out) {
			if ev.Event == "subscribed" {
				return true
			}
		}
		return false
	})
}

// waitPublication waits for a data: line on a curl -N stream whose
// envelope match accepts.
func waitPublication(t *testing.T, curl *bgProc, match func(fanout.Publication) bool) fanout.Publication {
	t.Helper()
	var got fanout.Publication
	waitOutput(t, curl, "matching publication", func(out string) bool {
		for _, ev := range sseEvents(out) {
			if ev.Event != "" {
				continue
			}
			if e, err := fanout.DecodeEnvelope([]byte(ev.Data)); err == nil && match(e) {
				got = e
				return true
			}
		}
		return false
	})
	return got
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// publishedID is the id herald publish printed.
func publishedID(t *testing.T, stdout string) string {
	t.Helper()
	id := strings.TrimSpace(stdout)
	if !uuidRE.MatchString(id) {
		t.Fatalf("herald publish printed %q, want the notification's id", stdout)
	}
	return id
}

// checkEnvelope checks the envelope fields the README lists.
func checkEnvelope(t *testing.T, e fanout.Publication, channel, typ string, schemaVersion int, data string) {
	t.Helper()
	var want, have any
	if err := json.Unmarshal([]byte(data), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(e.Data, &have); err != nil {
		t.Fatalf("data %s: %v", e.Data, err)
	}
	if e.Key.Channel != channel || e.Type != typ || e.SchemaVersion != schemaVersion || e.Offset == 0 || e.Epoch == "" ||
		e.Time.IsZero() || len(e.Freshness) == 0 || fmt.Sprint(have) != fmt.Sprint(want) {
		t.Fatalf("envelope %+v (data %s), want channel %s, type %s, schema_version %d, data %s", e, e.Data, channel, typ, schemaVersion, data)
	}
}
