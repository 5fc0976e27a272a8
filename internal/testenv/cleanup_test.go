package testenv

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// orderTB is a testing.TB whose cleanups the test runs itself (last
// registered first, as testing does), and whose temporary directories
// count, when removed, whether a process using them still ran.
type orderTB struct {
	testing.TB
	cleanups []func()
	procs    func() []*exec.Cmd // the processes started
	early    int                // directories removed while a process using them ran
}

func (o *orderTB) Cleanup(f func()) { o.cleanups = append(o.cleanups, f) }

func (o *orderTB) TempDir() string {
	dir, err := os.MkdirTemp("", "testenv-order-")
	if err != nil {
		o.Fatal(err)
	}
	o.Cleanup(func() {
		if anyRunning(dir, o.procs()...) {
			o.early++
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

func (o *orderTB) runCleanups() {
	for i := len(o.cleanups) - 1; i >= 0; i-- {
		o.cleanups[i]()
	}
}

// anyRunning reports whether one of procs that was not waited for yet
// has an argument naming dir, or anything in it ("" for any).
func anyRunning(dir string, procs ...*exec.Cmd) bool {
	for _, p := range procs {
		if p == nil || p.ProcessState != nil {
			continue
		}
		if dir == "" || slices.ContainsFunc(p.Args, func(a string) bool { return strings.HasPrefix(a, dir) }) {
			return true
		}
	}
	return false
}

// TestRedisProcKilledBeforeItsDirectory: a RedisProc's server, restarted
// once, is killed before its directories are removed.
func TestRedisProcKilledBeforeItsDirectory(t *testing.T) {
	t.Parallel()
	o := &orderTB{TB: t}
	r := StartRedis(o)
	first := r.proc
	r.Restart()
	o.procs = func() []*exec.Cmd { return []*exec.Cmd{first, r.proc} }
	o.runCleanups()
	if o.early > 0 || anyRunning("", first, r.proc) {
		t.Fatalf("%d directories removed while their redis-server ran; running after the cleanups: %v", o.early, anyRunning("", first, r.proc))
	}
}

// TestRedisClusterKilledBeforeItsDirectories: every node of a
// RedisCluster is killed before the directories are removed.
func TestRedisClusterKilledBeforeItsDirectories(t *testing.T) {
	t.Parallel()
	o := &orderTB{TB: t}
	c := StartRedisCluster(o)
	procs := slices.Clone(c.procs)
	o.procs = func() []*exec.Cmd { return procs }
	o.runCleanups()
	if o.early > 0 || anyRunning("", procs...) {
		t.Fatalf("%d directories removed while their node ran; running after the cleanups: %v", o.early, anyRunning("", procs...))
	}
}

// TestRedisSentinelKilledBeforeItsDirectories: the same for every
// process of a RedisSentinel deployment.
func TestRedisSentinelKilledBeforeItsDirectories(t *testing.T) {
	t.Parallel()
	o := &orderTB{TB: t}
	s := StartRedisSentinel(o)
	var procs []*exec.Cmd
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	o.procs = func() []*exec.Cmd { return procs }
	o.runCleanups()
	if o.early > 0 || anyRunning("", procs...) {
		t.Fatalf("%d directories removed while their process ran; running after the cleanups: %v", o.early, anyRunning("", procs...))
	}
}
