package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the master name RedisSentinel's sentinels monitor.
const SentinelMaster = "herald"

// SentinelDownAfter is how long RedisSentinel's sentinels wait before they
// count a primary that does not answer down (down-after-milliseconds).
const SentinelDownAfter = 500 * time.Millisecond

// RedisSentinel is a Redis Sentinel deployment on loopback ports: one
// primary, one replica and three sentinels (redis-server --sentinel),
// quorum 2, a primary counted down after 500 ms. Every process is killed
// when the test ends. It needs redis-server (Debian's redis-server
// package; make test installs it).
type RedisSentinel struct {
	t         testing.TB
	Primary   string   // host:port of the first primary
	Replica   string   // host:port of its replica
	Sentinels []string // host:port of each sentinel
	procs     map[string]*exec.Cmd
}

// StartRedisSentinel starts the deployment and waits until every sentinel
// knows the primary, the replica (in sync) and the two other sentinels,
// so a failover can be decided at once.
func StartRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	s := &RedisSentinel{t: t, procs: make(map[string]*exec.Cmd)}
	s.Primary, s.Replica = FreeAddr(t), FreeAddr(t)
	s.startServer(s.Primary)
	s.startServer(s.Replica, "--replicaof", "127.0.0.1", port(s.Primary))
	for range 3 {
		s.Sentinels = append(s.Sentinels, s.startSentinel(s.Primary))
	}
	s.waitSynced(s.Primary, s.Replica)
	for _, addr := range s.Sentinels {
		cl := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
		waitUntil(t, "sentinel "+addr+" knows the replica and the other sentinels", func(ctx context.Context) bool {
			replicas, _ := cl.Replicas(ctx, SentinelMaster).Result()
			sentinels, _ := cl.Sentinels(ctx, SentinelMaster).Result()
			return len(replicas) == 1 && len(sentinels) == 2
		})
		_ = cl.Close()
	}
	return s
}

// startSentinel starts a sentinel that monitors primary as
// SentinelMaster, and returns its address.
func (s *RedisSentinel) startSentinel(primary string) string {
	t := s.t
	t.Helper()
	addr := FreeAddr(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\n"+
		"sentinel monitor %s 127.0.0.1 %s 2\n"+
		"sentinel down-after-milliseconds %[3]s %[5]d\n"+
		"sentinel failover-timeout %[3]s 5000\n"+
		"sentinel parallel-syncs %[3]s 1\n", port(addr), dir, SentinelMaster, port(primary), SentinelDownAfter.Milliseconds())
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s.run(addr, conf, "--sentinel", "--loglevel", "warning")
	return addr
}

// StartLoneSentinel starts one more sentinel, which monitors primary (any
// redis-server) as SentinelMaster and never hears of the others: a
// sentinel cut off from them, which names primary whatever they decide.
// It returns its address; it is killed when the test ends.
func (s *RedisSentinel) StartLoneSentinel(primary string) string {
	s.t.Helper()
	return s.startSentinel(primary)
}

// Failover makes the sentinels fail over at once (SENTINEL FAILOVER, no
// agreement needed) and waits until every one of them names the replica
// as the primary, and it answers as one. The old primary is made its
// replica.
func (s *RedisSentinel) Failover() {
	t := s.t
	t.Helper()
	cl := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0], MaxRetries: -1})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := cl.Failover(ctx, SentinelMaster).Err(); err != nil {
		t.Fatalf("testenv: SENTINEL FAILOVER: %v", err)
	}
	for _, addr := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
		waitUntil(t, "sentinel "+addr+" names "+s.Replica, func(ctx context.Context) bool {
			a, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
			return err == nil && net.JoinHostPort(a[0], a[1]) == s.Replica
		})
		_ = sc.Close()
	}
	rc := redis.NewClient(&redis.Options{Addr: s.Replica, MaxRetries: -1})
	defer rc.Close()
	waitUntil(t, s.Replica+" answers as the primary", func(ctx context.Context) bool {
		role, err := rc.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
}

// Kill stops the process at addr at once (SIGKILL).
func (s *RedisSentinel) Kill(addr string) {
	if p := s.procs[addr]; p != nil {
		stopProc(p)
	}
	delete(s.procs, addr)
}

// Running says whether the process at addr runs.
func (s *RedisSentinel) Running(addr string) bool { return s.procs[addr] != nil }

// RestartAsReplica starts the server at addr again (after Kill), empty,
// as a replica of primary (what the sentinels would also make it, at
// their next check of it, up to 10 s later), and waits until it is in
// sync.
func (s *RedisSentinel) RestartAsReplica(addr, primary string) {
	s.startServer(addr, "--replicaof", "127.0.0.1", port(primary))
	s.waitSynced(primary, addr)
}

// PrimaryNow is the primary the sentinels name now.
func (s *RedisSentinel) PrimaryNow(ctx context.Context) (string, error) {
	cl := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0]})
	defer cl.Close()
	a, err := cl.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(a[0], a[1]), nil
}

func (s *RedisSentinel) startServer(addr string, extra ...string) {
	args := append([]string{"--dir", s.t.TempDir(), "--save", "", "--appendonly", "no", "--loglevel", "warning",
		"--repl-diskless-sync-delay", "0"}, extra...)
	s.run(addr, "", args...)
}

// run starts redis-server (with conf, when given) on addr and waits until
// it answers.
func (s *RedisSentinel) run(addr, conf string, args ...string) {
	t := s.t
	t.Helper()
	var all []string
	if conf != "" {
		all = append(all, conf)
	}
	all = append(all, "--port", port(addr), "--bind", "127.0.0.1", "--daemonize", "no")
	cmd := exec.Command("redis-server", append(all, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: redis-server: %v", err)
	}
	s.procs[addr] = cmd
	// Killed before its directory (a TempDir made before) is removed: a
	// sentinel rewrites its config file there at any time.
	t.Cleanup(func() { s.Kill(addr) })
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer cl.Close()
	waitUntil(t, "redis-server on "+addr+" answers", func(ctx context.Context) bool { return cl.Ping(ctx).Err() == nil })
}

// waitSynced waits until primary reports replica online.
func (s *RedisSentinel) waitSynced(primary, replica string) {
	cl := redis.NewClient(&redis.Options{Addr: primary, MaxRetries: -1})
	defer cl.Close()
	want := "port=" + port(replica) + ",state=online"
	waitUntil(s.t, "replica "+replica+" in sync", func(ctx context.Context) bool {
		info, _ := cl.Info(ctx, "replication").Result()
		return strings.Contains(info, want)
	})
}

// waitUntil polls cond every 20 ms, for at most 15 s.
func waitUntil(t testing.TB, what string, cond func(ctx context.Context) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for !cond(ctx) {
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: %s: timed out", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
