package testenv

import (
	"context"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisProc is a redis-server of the test's own on a loopback port,
// without persistence, so Restart loses its data as a Redis restarted
// without persistence does. It is killed when the test ends. It needs
// redis-server (Debian's redis-server package; make test installs it).
type RedisProc struct {
	t    testing.TB
	Addr string // host:port
	proc *exec.Cmd
}

// StartRedis starts a redis-server and waits until it answers.
func StartRedis(t testing.TB) *RedisProc {
	t.Helper()
	r := &RedisProc{t: t, Addr: FreeAddr(t)}
	r.start()
	return r
}

// URL is the redis:// URL of the server.
func (r *RedisProc) URL() string { return "redis://" + r.Addr + "/0" }

// Restart kills the server (SIGKILL) and starts it again on the same
// port, empty.
func (r *RedisProc) Restart() {
	r.t.Helper()
	r.kill()
	r.start()
}

// Kill kills the server (SIGKILL); it stays down until Start.
func (r *RedisProc) Kill() { r.kill() }

// Start starts a killed server again on the same port, empty, and waits
// until it answers.
func (r *RedisProc) Start() {
	r.t.Helper()
	r.start()
}

func (r *RedisProc) start() {
	t := r.t
	t.Helper()
	_, port, _ := net.SplitHostPort(r.Addr)
	dir := t.TempDir()
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--daemonize", "no",
		"--dir", dir, "--save", "", "--appendonly", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: redis-server: %v", err)
	}
	r.proc = cmd
	// Registered after its directory: cleanups run last first, so the
	// process is killed before the directory is removed.
	t.Cleanup(func() { stopProc(cmd) })
	cl := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for cl.Ping(ctx).Err() != nil {
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: redis-server on %s does not answer", r.Addr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (r *RedisProc) kill() {
	if r.proc != nil {
		stopProc(r.proc)
	}
	r.proc = nil
}

// stopProc kills cmd's process (SIGKILL, by its PID) and waits for it;
// once it was waited for, it does nothing: the PID may be another
// process's by then.
func stopProc(cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}
