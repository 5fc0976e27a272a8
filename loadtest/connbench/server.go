package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/heraldgw/herald/internal/heraldenv"
	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/cfoutbox"
)

// target is the server under load: a child `herald serve` this program
// started, or a running server named by -url.
type target struct {
	name   string // "herald serve" or "centrifugo", for messages
	base   string // http://127.0.0.1:port
	secret string // HS256 secret the server verifies tokens with
	apiKey string // Centrifugo's server API key
	pid    int    // 0: unknown (a -url server without -server-pid)
	desc   string // for the report
	// cfOutbox is Centrifugo's outbox consumer with -publish-via outbox;
	// nil otherwise.
	cfOutbox *cfoutbox.Consumer

	child *benchkit.Child // nil for a -url server
	dir   string          // the child's temporary directory (data dir, log)
	// stagePath is where a -stages child writes its timings (outside dir,
	// which stop removes); "" without -stages.
	stagePath string
}

// remoteTarget is a running server named by -url.
func remoteTarget(cfg config) *target {
	desc := "running server at " + cfg.URL
	if cfg.ServerPID > 0 {
		desc += fmt.Sprintf(" (pid %d)", cfg.ServerPID)
	}
	return &target{base: strings.TrimRight(cfg.URL, "/"), secret: cfg.Secret, pid: cfg.ServerPID, desc: desc}
}

// childMaxConnections is the child's --max-connections: room for the
// largest run plus the publisher and a few scrapes.
const childMaxConnections = maxConns + 64

var listenRE = regexp.MustCompile(`listening on (http://\S+)`)

// startChild starts `herald serve` on a loopback port chosen by the
// kernel, with a fresh data directory (embedded SQLite unless
// cfg.DatabaseURL), the in-memory broker, a random HS256 secret and
// bounds sized for a load test, and waits until /readyz answers 200.
func startChild(ctx context.Context, cfg config, progress io.Writer) (*target, error) {
	return inTempDir("connbench-", func(dir string) (_ *target, err error) {
		bin := cfg.HeraldBin
		if bin == "" {
			fmt.Fprintln(progress, "connbench: building ./cmd/herald")
			if bin, err = buildHerald(ctx, dir, cfg.Stages); err != nil {
				return nil, err
			}
		}
		secret := make([]byte, 24)
		_, _ = rand.Read(secret)
		t := &target{name: "herald serve", secret: hex.EncodeToString(secret), dir: dir}
		args := []string{
			"serve",
			"--listen", "127.0.0.1:0",
			"--data-dir", filepath.Join(dir, "data"),
			"--jwt-hmac-secret", t.secret,
			"--log-level", "warn",
			"--max-connections", strconv.Itoa(childMaxConnections),
			// Every connection comes from 127.0.0.1: the per-address attempt
			// rate (20/s by default) would take minutes to let thousands in.
			"--connect-attempts-per-ip", "-1",
		}
		store := "embedded SQLite"
		if cfg.DatabaseURL != "" {
			args = append(args, "--database-url", cfg.DatabaseURL)
			store = "PostgreSQL"
		}
		args = append(args, cfg.ServeArgs...)

		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = dir, heraldenv.Clean() // the child runs with exactly the flags we give it
		if cfg.Stages {
			f, err := os.CreateTemp("", "connbench-stages-")
			if err != nil {
				return nil, fmt.Errorf("connbench: -stages: %w", err)
			}
			f.Close()
			t.stagePath = f.Name()
			cmd.Env = append(cmd.Env, stageTraceEnv+"="+t.stagePath)
		}
		base := make(chan string, 1)
		// Read the banner for the address; the rest of stdout is drained
		// until the child exits.
		t.child, err = benchkit.StartChild(cmd, filepath.Join(dir, "herald.log"), func(stdout io.Reader) {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
					select {
					case base <- m[1]:
					default:
					}
				}
			}
		})
		if err != nil {
			return nil, fmt.Errorf("connbench: %w", err)
		}
		t.pid = t.child.PID
		select {
		case t.base = <-base:
		case <-t.child.Exited():
			return t, fmt.Errorf("connbench: herald serve exited: %v\n%s", t.child.WaitErr(), t.logTail())
		case <-time.After(60 * time.Second):
			return t, fmt.Errorf("connbench: herald serve printed no address in 60s\n%s", t.logTail())
		case <-ctx.Done():
			return t, fmt.Errorf("connbench: starting herald serve: %w", ctx.Err())
		}
		if err := waitOK(ctx, t, "/readyz"); err != nil {
			return t, err
		}
		t.desc = fmt.Sprintf("child `herald serve` (pid %d, %s, in-memory broker, --max-connections %d, --connect-attempts-per-ip -1%s)",
			t.pid, store, childMaxConnections, strings.Join(append([]string{""}, cfg.ServeArgs...), " "))
		return t, nil
	})
}

// inTempDir runs start, the start of a child server, with a new
// temporary directory (pattern as os.MkdirTemp's). When start fails, the
// child it returns, if any, is stopped and the directory is removed.
func inTempDir(pattern string, start func(dir string) (*target, error)) (*target, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return nil, fmt.Errorf("connbench: temp dir: %w", err)
	}
	t, err := start(dir)
	if err != nil {
		if t != nil {
			_ = t.stop()
		}
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return t, nil
}

// buildHerald builds ./cmd/herald of the module this program belongs to
// into dir; with stages, the diagnostic build that times publications
// (-tags heraldstages).
func buildHerald(ctx context.Context, dir string, stages bool) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "herald")
	args := []string{"build", "-o", bin}
	if stages {
		args = append(args, "-tags", "heraldstages")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/herald")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("connbench: go build ./cmd/herald: %w\n%s", err, out)
	}
	return bin, nil
}

// moduleRoot finds the Herald module from the working directory.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("connbench: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	b, err := os.ReadFile(gomod)
	if err != nil || !bytes.Contains(b, []byte("module github.com/heraldgw/herald\n")) {
		return "", fmt.Errorf("connbench: run inside the Herald module (go.mod %q), or pass -herald-bin", gomod)
	}
	return filepath.Dir(gomod), nil
}

// waitOK polls path until it answers 200 (Herald's /readyz: the Worker's
// first claim went through), for at most 30 s.
func waitOK(ctx context.Context, t *target, path string) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base+path, nil)
		if err != nil {
			return fmt.Errorf("connbench: %s: %w", path, err)
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !t.alive() {
			return fmt.Errorf("connbench: %s exited: %v\n%s", t.name, t.child.WaitErr(), t.logTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("connbench: %s%s not 200 after 30s (last: %v)\n%s", t.base, path, err, t.logTail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connbench: %s: %w", path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// alive reports whether a child server is still running (always true for
// a -url server).
func (t *target) alive() bool { return t.child == nil || t.child.Alive() }

// stop ends a child: SIGTERM (a graceful shutdown), SIGKILL after 20 s;
// then its directory is removed. A -url server is left alone. Safe to call
// twice.
func (t *target) stop() error {
	if t.child == nil {
		return nil
	}
	t.child.Stop(20 * time.Second)
	var err error
	if werr := t.child.WaitErr(); werr != nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) || ee.ExitCode() != 0 {
			err = fmt.Errorf("connbench: %s (pid %d) did not exit cleanly: %w\n%s", t.name, t.pid, werr, t.logTail())
		}
	}
	if t.dir != "" {
		_ = os.RemoveAll(t.dir)
		t.dir = ""
	}
	return err
}

// errorLines counts the lines at level error in a child Centrifugo's JSON
// log: its outbox consumer reports a failed batch there (and retries it,
// which the delivery check would see as duplicates).
func (t *target) errorLines() int {
	if t.child == nil {
		return -1
	}
	return t.child.ErrorLines()
}

// logTail is the end of the child's log, for error messages.
func (t *target) logTail() string {
	if t.child == nil {
		return ""
	}
	return t.child.LogTail(2000)
}
