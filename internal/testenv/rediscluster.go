package testenv

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a 3-primary Redis Cluster of redis-server processes on
// loopback ports, each with its own directory, killed when the test ends.
// It needs redis-server and redis-cli (Debian's redis-server package;
// make test installs it).
type RedisCluster struct {
	t     testing.TB
	Addrs []string // host:port of each node
	dirs  []string
	procs []*exec.Cmd
}

// StartRedisCluster starts the nodes, creates the cluster and waits until
// every node reports it ok.
func StartRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	c := &RedisCluster{t: t}
	for range 3 {
		c.Addrs = append(c.Addrs, "127.0.0.1:"+strconv.Itoa(freeClusterPort(t)))
		c.dirs = append(c.dirs, t.TempDir())
		c.procs = append(c.procs, nil)
	}
	// Registered after the directories: cleanups run last first, so every
	// node is killed before its directory (where it rewrites nodes.conf at
	// any time) is removed.
	t.Cleanup(func() {
		for _, p := range c.procs {
			if p != nil {
				stopProc(p)
			}
		}
	})
	for i := range c.Addrs {
		c.Start(i)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("testenv: redis-cli --cluster create: %v\n%s", err, out)
	}
	for i := range c.Addrs {
		c.WaitOK(i)
	}
	return c
}

// freeClusterPort returns a loopback port that is free, as is its cluster
// bus port (port + 10000).
func freeClusterPort(t testing.TB) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if port+10000 > 65535 {
			_ = ln.Close()
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		_ = ln.Close()
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port
	}
	t.Fatal("testenv: no free port pair for a cluster node")
	return 0
}

// Start runs node i's redis-server (again, after Kill: same port and
// cluster config file) and waits until it answers.
func (c *RedisCluster) Start(i int) {
	t := c.t
	t.Helper()
	_, port, _ := net.SplitHostPort(c.Addrs[i])
	cmd := exec.Command("redis-server",
		"--port", port, "--bind", "127.0.0.1", "--daemonize", "no",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(c.dirs[i], "nodes.conf"),
		"--dir", c.dirs[i], "--save", "", "--appendonly", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: redis-server: %v", err)
	}
	c.procs[i] = cmd
	cl := c.Node(i)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for cl.Ping(ctx).Err() != nil {
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: redis-server on %s does not answer", c.Addrs[i])
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Kill stops node i at once (SIGKILL).
func (c *RedisCluster) Kill(i int) {
	if c.procs[i] != nil {
		stopProc(c.procs[i])
	}
	c.procs[i] = nil
}

// Node is a plain client to node i, closed when the test ends.
func (c *RedisCluster) Node(i int) *redis.Client {
	cl := redis.NewClient(&redis.Options{Addr: c.Addrs[i], MaxRetries: -1})
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// WaitOK waits until node i reports cluster_state:ok and sees 3 shards
// owning slots.
func (c *RedisCluster) WaitOK(i int) {
	t := c.t
	t.Helper()
	cl := c.Node(i)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		info, _ := cl.ClusterInfo(ctx).Result()
		shards, _ := cl.ClusterShards(ctx).Result()
		owning := 0
		for _, sh := range shards {
			if len(sh.Slots) > 0 {
				owning++
			}
		}
		if strings.Contains(info, "cluster_state:ok") && owning == 3 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: cluster node %s not ok: %s", c.Addrs[i], info)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
