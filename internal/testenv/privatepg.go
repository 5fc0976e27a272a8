package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PrivatePG is a PostgreSQL cluster of one test, so stopping, crashing or
// reconfiguring it disturbs nobody else.
type PrivatePG struct {
	bin      string // directory of initdb, pg_ctl, postgres
	dir      string // owns data/, the socket and the log
	data     string
	port     int
	asUser   string // run the binaries as this user ("" = as ourselves)
	logFile  string
	settings []string // extra -c settings
}

// pgBinDir finds the newest /usr/lib/postgresql/<version>/bin with initdb.
func pgBinDir(t testing.TB) string {
	t.Helper()
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) == 0 {
		if p, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p)
		}
		t.Fatal("no initdb under /usr/lib/postgresql/*/bin or on PATH: install the PostgreSQL server package")
	}
	sort.Slice(matches, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(matches[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(matches[j]))))
		return vi > vj
	})
	return filepath.Dir(matches[0])
}

// PGTool is the path of a PostgreSQL program (psql, pg_dump, …) of the
// newest server version installed.
func PGTool(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(pgBinDir(t), name)
}

const (
	// privatePGPrefix names the clusters' directories in the temporary
	// directory.
	privatePGPrefix = "herald-crashtest-pg-"
	// privatePGOwner is the file in a cluster's directory that holds the
	// pid of the test process that started it.
	privatePGOwner = "test.pid"
)

// StartPrivatePG initdb's a cluster in a temporary directory (trust auth,
// 127.0.0.1 on a free port, socket in the directory) and starts it with
// the extra server settings given ("name=value", for -c). As root, initdb
// and pg_ctl run as the postgres user, which owns the directory. The
// cluster is stopped and removed when t ends. A test process killed
// before its cleanup ran (a test timeout, a signal) leaves its cluster
// running: the next StartPrivatePG, in any test process, stops and
// removes the clusters whose test process is gone.
func StartPrivatePG(t testing.TB, settings ...string) *PrivatePG {
	t.Helper()
	bin, asUser := pgBinDir(t), ""
	if os.Geteuid() == 0 {
		asUser = "postgres"
	}
	reapPrivatePGs(t, bin, asUser)
	dir, err := os.MkdirTemp("", privatePGPrefix)
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, privatePGOwner), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("write the test process's pid: %v", err)
	}
	pg := &PrivatePG{bin: bin, dir: dir, data: filepath.Join(dir, "data"), port: FreePort(t),
		logFile: filepath.Join(dir, "postgres.log"), settings: settings, asUser: asUser}
	if asUser != "" {
		u, err := user.Lookup(asUser)
		if err != nil {
			t.Fatalf("running as root, initdb needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("chown %s: %v", dir, err)
		}
	}
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(pg.data, "postmaster.pid")); err == nil {
			if err := pg.ctl("stop", "-m", "immediate"); err != nil {
				t.Errorf("stop private PostgreSQL: %v", err)
			}
		}
		if t.Failed() {
			if b, err := os.ReadFile(pg.logFile); err == nil {
				t.Logf("private PostgreSQL log (tail):\n%s", tailLines(string(b), 30))
			}
		}
		_ = os.RemoveAll(dir)
	})
	if out, err := pg.run(time.Minute, "initdb", "-D", pg.data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	if err := pg.Start(); err != nil {
		t.Fatalf("start private PostgreSQL: %v", err)
	}
	return pg
}

// reapPrivatePGs stops and removes the clusters of test processes that
// are gone without their cleanup, so a killed run leaves no server behind
// for long. A directory without the owner's pid (one being created) is
// left alone.
func reapPrivatePGs(t testing.TB, bin, asUser string) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), privatePGPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, privatePGOwner))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		old := &PrivatePG{bin: bin, dir: dir, data: filepath.Join(dir, "data"), asUser: asUser}
		if _, err := os.Stat(filepath.Join(old.data, "postmaster.pid")); err == nil {
			if err := old.Stop("immediate"); err != nil {
				t.Logf("stop the PostgreSQL left by test process %d in %s: %v", pid, dir, err)
				continue
			}
		}
		_ = os.RemoveAll(dir)
		t.Logf("stopped the PostgreSQL left by test process %d, which is gone (%s)", pid, dir)
	}
}

// processAlive reports whether process pid runs: on Linux, whether /proc
// has it and not as a zombie (a killed process its parent has not waited
// for yet); elsewhere, whether signal 0 reaches it.
func processAlive(pid int) bool {
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// pid (comm) state …: the state follows the last ')'.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		return len(f) == 0 || f[0] != "Z"
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Start starts the cluster again (after Stop) and waits until it accepts
// connections.
func (pg *PrivatePG) Start() error { return pg.ctl("start") }

// Stop stops the cluster with the pg_ctl shutdown mode given: "fast",
// "smart" or "immediate" (a crash: no checkpoint, recovery at the next
// start).
func (pg *PrivatePG) Stop(mode string) error { return pg.ctl("stop", "-m", mode) }

// Tool is the path of a PostgreSQL client program (pg_dump, psql, …) of
// the version the cluster runs.
func (pg *PrivatePG) Tool(name string) string { return filepath.Join(pg.bin, name) }

// URL is the connection URL of the cluster's postgres database.
func (pg *PrivatePG) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.port)
}

// ctl runs pg_ctl: "start" (waits until it accepts connections) or
// "stop" with a mode.
func (pg *PrivatePG) ctl(action string, extra ...string) error {
	args := []string{action, "-D", pg.data, "-w", "-t", "30"}
	if action == "start" {
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off", pg.port, pg.dir)
		for _, s := range pg.settings {
			opts += " -c " + s
		}
		args = append(args, "-l", pg.logFile, "-o", opts)
	}
	out, err := pg.run(45*time.Second, "pg_ctl", append(args, extra...)...)
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %w\n%s", action, err, out)
	}
	return nil
}

// run runs a PostgreSQL binary, as pg.asUser when set.
func (pg *PrivatePG) run(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	path := filepath.Join(pg.bin, name)
	var cmd *exec.Cmd
	if pg.asUser != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", pg.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = pg.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// tailLines is the last n lines of s.
func tailLines(s string, n int) string {
	b := []byte(s)
	count := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			count++
			if count > n {
				return string(b[i+1:])
			}
		}
	}
	return s
}
