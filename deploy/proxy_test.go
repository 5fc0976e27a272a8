package deploy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/csv"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/internal/testclient"
	"github.com/heraldgw/herald/internal/testenv"
)

// The proxy tests run deploy/nginx/herald.conf and deploy/haproxy/herald.cfg
// as written in front of two real `herald serve` nodes (one PostgreSQL
// database, one Redis key prefix, one token secret). The only changes to
// the files are the documented upstream addresses 127.0.0.1:8081 and
// 127.0.0.1:8082, the listen ports, the certificate, log, and stats socket
// paths, and, for the idle test, the 75s timeouts. Every check goes
// through TLS, as clients would.

const (
	nginxBin   = "/usr/sbin/nginx"
	haproxyBin = "/usr/sbin/haproxy"
	nginxConf  = "nginx/herald.conf"
	haproxyCfg = "haproxy/herald.cfg"

	proxySecret = "deploy-proxy-test-secret-0123456789"
	tenant      = "acme"

	// The nodes' heartbeat and the proxies' substituted idle timeout in
	// the idle test: streams must outlive several such timeouts.
	testHeartbeat    = time.Second
	shortIdleTimeout = 3 * time.Second
)

// documented upstreams, as the configuration files name them.
var documentedUpstreams = [2]string{"127.0.0.1:8081", "127.0.0.1:8082"}

func TestNginx(t *testing.T) {
	t.Parallel()
	runProxySuite(t, nginxKind)
}

func TestHAProxy(t *testing.T) {
	t.Parallel()
	runProxySuite(t, haproxyKind)
}

// proxyKind starts one proxy from its configuration file.
type proxyKind struct {
	bin   string
	start func(t *testing.T, tl tlsFiles, upstreams [2]string, idle time.Duration) *proxy
}

var (
	nginxKind   = proxyKind{nginxBin, startNginx}
	haproxyKind = proxyKind{haproxyBin, startHAProxy}
)

func runProxySuite(t *testing.T, kind proxyKind) {
	requireProxyBinary(t, kind.bin)
	tl := writeTLSFiles(t)
	c := startCluster(t)
	p := kind.start(t, tl, c.upstreams(), 0)
	cl := newClients(t, tl)

	t.Run("redirect", func(t *testing.T) { checkRedirect(t, p) })
	t.Run("forwarded-headers", func(t *testing.T) {
		rec := startRecorder(t)
		rp := kind.start(t, tl, [2]string{rec.addr, rec.addr}, 0)
		checkForwardedHeaders(t, rp, rec, cl)
	})
	t.Run("sse", func(t *testing.T) { checkSSE(t, c, p, cl) })
	t.Run("websocket", func(t *testing.T) { checkWebSocket(t, c, p, cl) })
	t.Run("trusted-proxies", func(t *testing.T) { checkClientLimits(t, p, tl) })
	t.Run("access-log", func(t *testing.T) { checkAccessLog(t, p, cl) })
	t.Run("idle", func(t *testing.T) {
		short := kind.start(t, tl, c.upstreams(), shortIdleTimeout)
		t.Run("sse", func(t *testing.T) { t.Parallel(); checkIdleSSE(t, c, short, cl) })
		t.Run("websocket", func(t *testing.T) { t.Parallel(); checkIdleWebSocket(t, c, short, cl) })
	})
	t.Run("restart-sse", func(t *testing.T) { checkRestartSSE(t, c, p, cl) })
	t.Run("restart-websocket", func(t *testing.T) { checkRestartWebSocket(t, c, p, cl) })
}

// requireProxyBinary fails (never skips) when the proxy is not installed.
func requireProxyBinary(t *testing.T, bin string) {
	t.Helper()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing (%v): run `bash scripts/test-services.sh` as root, which installs Debian's nginx and haproxy, or `apt-get install -y nginx haproxy`", bin, err)
	}
}

// subst replaces old by new in s, failing unless old occurs exactly n
// times: the test and the configuration file cannot drift apart silently.
func subst(t *testing.T, file, s, old, new string, n int) string {
	t.Helper()
	if got := strings.Count(s, old); got != n {
		t.Fatalf("%s: %q occurs %d times, the test expects %d", file, old, got, n)
	}
	return strings.ReplaceAll(s, old, new)
}

// replacement is one subst: old, which must occur n times, becomes new.
type replacement struct {
	old, new string
	n        int
}

// substAll makes each replacement, in order, as subst does.
func substAll(t *testing.T, file, s string, rs []replacement) string {
	t.Helper()
	for _, r := range rs {
		s = subst(t, file, s, r.old, r.new, r.n)
	}
	return s
}

// ---- the Herald nodes -------------------------------------------------

type cluster struct {
	bin, dbURL string
	nodes      [2]*node
}

type node struct {
	t    *testing.T
	name string
	bin  string
	addr string
	args []string
	dir  string // working directory
	log  string // file collecting stdout and stderr of every run

	mu   sync.Mutex
	proc *proc // nil while the node is down
}

// proc is a started process whose exit is awaited by one goroutine.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	err  error         // its exit status, once done is closed
}

// startProc runs args with stdout and stderr appended to logPath.
func startProc(t *testing.T, name, logPath, dir string, args ...string) *proc {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	// Should the test binary die without its cleanups (a -timeout panic),
	// the process is told to stop too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p
}

// stop sends sig and waits for the exit, killing the process after
// timeout; it reports whether the process stopped on sig.
func (p *proc) stop(sig os.Signal, timeout time.Duration) bool {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return false
	}
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	bin := buildAsRecipe(t, readRecipe(t))
	dbURL := testenv.DatabaseURL(t)
	redisURL, prefix := testenv.Redis(t)
	if out, err := exec.Command(bin, "migrate", "--database-url", dbURL).CombinedOutput(); err != nil {
		t.Fatalf("herald migrate: %v\n%s", err, out)
	}
	c := &cluster{bin: bin, dbURL: dbURL}
	for i := range c.nodes {
		n := &node{t: t, name: fmt.Sprintf("node%d", i+1), bin: bin, addr: testenv.FreeAddr(t)}
		n.dir = t.TempDir()
		n.log = filepath.Join(n.dir, n.name+".log")
		n.args = []string{"serve",
			"--listen", n.addr,
			"--database-url", dbURL,
			"--redis-url", redisURL,
			"--redis-key-prefix", prefix,
			"--jwt-hmac-secret", proxySecret,
			"--data-dir", t.TempDir(),
			"--heartbeat-interval", testHeartbeat.String(),
			"--outbox-lease", "5s",
			// The proxies connect from loopback: the client is the
			// address they forward.
			"--trusted-proxies", "127.0.0.1/32",
			"--log-level", "info",
		}
		c.nodes[i] = n
		t.Cleanup(n.stop)
		n.start(t)
	}
	return c
}

func (c *cluster) upstreams() [2]string { return [2]string{c.nodes[0].addr, c.nodes[1].addr} }

// start runs the node (again, on the same address) and waits for /readyz;
// t is the calling (sub)test.
func (n *node) start(t *testing.T) {
	t.Helper()
	p := startProc(t, n.name, n.log, n.dir, append([]string{n.bin}, n.args...)...)
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
	waitHTTP(t, "http://"+n.addr+"/readyz", http.StatusOK, p, n.logTail)
}

// take returns the running process and marks the node down.
func (n *node) take() *proc {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.proc
	n.proc = nil
	return p
}

// kill ends the node at once (SIGKILL), as a crash would.
func (n *node) kill() {
	if p := n.take(); p != nil {
		p.stop(os.Kill, time.Minute)
	}
}

// stop ends the node with SIGTERM, as its service manager would.
func (n *node) stop() {
	if p := n.take(); p != nil && !p.stop(syscall.SIGTERM, 30*time.Second) {
		n.t.Errorf("%s did not stop within 30s of SIGTERM", n.name)
	}
}

func (n *node) logTail() string { return fileTail(n.log) }

// connections reads herald_connections{transport} from the node's /metrics.
func (n *node) connections(transport string) (int, error) {
	resp, err := http.Get("http://" + n.addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	prefix := `herald_connections{transport="` + transport + `"} `
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, sc.Err()
}

// holder waits until exactly one connection of transport is open, over
// both nodes, and returns the node holding it.
func (c *cluster) holder(t *testing.T, transport string) *node {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		var at *node
		total := 0
		for _, n := range c.nodes {
			k, err := n.connections(transport)
			if err != nil {
				t.Fatalf("%s /metrics: %v", n.name, err)
			}
			total += k
			if k > 0 {
				at = n
			}
		}
		if total == 1 {
			return at
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s connections open over the two nodes, want 1", total, transport)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// publish stages one notification with `herald publish`, as an operator
// would, and returns its message id.
func (c *cluster) publish(t *testing.T, channel string, n int) string {
	t.Helper()
	out, err := exec.Command(c.bin, "publish", "--database-url", c.dbURL, "--tenant", tenant,
		"--channel", channel, "--type", "order.updated", "--data", fmt.Sprintf(`{"n":%d}`, n)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("herald publish: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("herald publish: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// publishWhileAway publishes records 2 to 4 of channel, the first
// having reached a client that is now gone, and waits until they are
// dispatched; it returns their ids.
func (c *cluster) publishWhileAway(t *testing.T, channel string) []string {
	var ids []string
	for i := 2; i <= 4; i++ {
		ids = append(ids, c.publish(t, channel, i))
	}
	c.waitDispatched(t, channel, 4)
	return ids
}

// waitDispatched waits until n records of channel are dispatched, that is
// in the channel's history in Redis (`herald outbox list`).
func (c *cluster) waitDispatched(t *testing.T, channel string, n int) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		out, err := exec.Command(c.bin, "outbox", "list", "--database-url", c.dbURL, "--tenant", tenant,
			"--channel", channel, "--state", "dispatched", "--json").Output()
		if err != nil {
			t.Fatalf("herald outbox list: %v", err)
		}
		got := strings.Count(string(out), "\n")
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records of %s dispatched after %v, want %d", got, channel, waitBound, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func mintToken(t *testing.T, grants ...string) string {
	t.Helper()
	tok, err := auth.MintHS256([]byte(proxySecret), auth.Claims{
		Subject: "u1", Tenant: tenant, Subscribe: grants, ExpiresAt: time.Now().Add(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// waitHTTP polls url until it answers want; a process that exits first
// ends the test with its log.
func waitHTTP(t *testing.T, url string, want int, p *proc, logTail func() string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(waitBound)
	last := ""
	for {
		select {
		case <-p.done:
			t.Fatalf("%s exited before %s answered %d: %v\n%s", p.name, url, want, p.err, logTail())
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer %d within %v (last: %s)\n%s", url, want, waitBound, last, logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func fileTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// ---- TLS --------------------------------------------------------------

type tlsFiles struct {
	cert, key, combined string // PEM files: certificate, key, both (HAProxy)
	pool                *x509.CertPool
}

// writeTLSFiles makes a self-signed certificate for 127.0.0.1.
func writeTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "herald proxy test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	dir := t.TempDir()
	tl := tlsFiles{
		cert: filepath.Join(dir, "fullchain.pem"), key: filepath.Join(dir, "privkey.pem"),
		combined: filepath.Join(dir, "herald.pem"), pool: x509.NewCertPool(),
	}
	for path, b := range map[string][]byte{tl.cert: certPEM, tl.key: keyPEM, tl.combined: append(append([]byte{}, certPEM...), keyPEM...)} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tl.pool.AppendCertsFromPEM(certPEM)
	return tl
}

// clients are the test's HTTPS clients: SSE over HTTP/2 (as browsers use
// it through a TLS proxy), WebSocket over HTTP/1.1.
type clients struct {
	sse, ws *http.Client
}

func newClients(t *testing.T, tl tlsFiles) clients {
	t.Helper()
	h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tl.pool}, ForceAttemptHTTP2: true}
	h1 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tl.pool, NextProtos: []string{"http/1.1"}}}
	t.Cleanup(func() {
		h2.CloseIdleConnections()
		h1.CloseIdleConnections()
	})
	return clients{sse: &http.Client{Transport: h2}, ws: &http.Client{Transport: h1}}
}

// ---- the proxies ------------------------------------------------------

type proxy struct {
	name      string
	base      string // https://127.0.0.1:port
	plain     string // http://127.0.0.1:port
	log       string // the process's output (and error log)
	accessLog string
	stats     string // HAProxy's stats socket
}

func (p *proxy) host() string { return strings.TrimPrefix(p.base, "https://") }

func isRoot() bool { return os.Geteuid() == 0 }

// startNginx runs deploy/nginx/herald.conf inside a main configuration
// standing in for Debian's /etc/nginx/nginx.conf. idle > 0 replaces the
// proxy timeouts.
func startNginx(t *testing.T, tl tlsFiles, up [2]string, idle time.Duration) *proxy {
	t.Helper()
	return startOnFreePorts(t, nginxConf, func(s, dir, httpPort, httpsPort string) (*proxy, []string) {
		s = substAll(t, nginxConf, s, []replacement{
			{"server " + documentedUpstreams[0] + " ", "server " + up[0] + " ", 1},
			{"server " + documentedUpstreams[1] + " ", "server " + up[1] + " ", 1},
			{"    listen 80;", "    listen 127.0.0.1:" + httpPort + ";", 1},
			{"    listen 443 ssl http2;", "    listen 127.0.0.1:" + httpsPort + " ssl http2;", 1},
			{"/etc/ssl/herald/fullchain.pem", tl.cert, 1},
			{"/etc/ssl/herald/privkey.pem", tl.key, 1},
			{"/var/log/nginx/", dir + "/", 3},
		})
		if idle > 0 {
			v := fmt.Sprintf("%ds;", int(idle/time.Second))
			s = subst(t, nginxConf, s, "proxy_read_timeout 75s;", "proxy_read_timeout "+v, 1)
			s = subst(t, nginxConf, s, "proxy_send_timeout 75s;", "proxy_send_timeout "+v, 1)
		}
		site := filepath.Join(dir, "herald.conf")
		if err := os.WriteFile(site, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		userLine := ""
		if isRoot() {
			// Run the workers as the current user too (else nginx picks nobody).
			u, err := user.Current()
			if err != nil {
				t.Fatal(err)
			}
			userLine = "user " + u.Username + ";"
		}
		// What Debian's nginx.conf sets around conf.d/*.conf, with writable
		// paths, plus gzip for event streams: herald.conf must turn it off.
		main := fmt.Sprintf(`%s
	worker_processes 2;
	pid %[2]s/nginx.pid;
	error_log %[2]s/error.log;
	events { worker_connections 1024; }
	http {
	    sendfile on;
	    tcp_nopush on;
	    types_hash_max_size 2048;
	    include /etc/nginx/mime.types;
	    default_type application/octet-stream;
	    access_log %[2]s/access.log;
	    client_body_temp_path %[2]s/client_body;
	    proxy_temp_path %[2]s/proxy;
	    fastcgi_temp_path %[2]s/fastcgi;
	    uwsgi_temp_path %[2]s/uwsgi;
	    scgi_temp_path %[2]s/scgi;
	    gzip on;
	    gzip_types text/event-stream application/json;
	    include %[3]s;
	}
	`, userLine, dir, site)
		mainPath := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(mainPath, []byte(main), 0o600); err != nil {
			t.Fatal(err)
		}
		p := &proxy{name: "nginx", log: filepath.Join(dir, "error.log"), accessLog: filepath.Join(dir, "herald.access.log")}
		args := []string{nginxBin, "-p", dir, "-e", p.log, "-c", mainPath}
		if out, err := exec.Command(args[0], append(args[1:], "-t")...).CombinedOutput(); err != nil {
			t.Fatalf("nginx -t: %v\n%s", err, out)
		}
		return p, append(args, "-g", "daemon off;")
	})
}

// startHAProxy runs deploy/haproxy/herald.cfg. idle > 0 replaces the
// client, server and tunnel timeouts.
func startHAProxy(t *testing.T, tl tlsFiles, up [2]string, idle time.Duration) *proxy {
	t.Helper()
	return startOnFreePorts(t, haproxyCfg, func(s, dir, httpPort, httpsPort string) (*proxy, []string) {
		stats := filepath.Join(dir, "admin.sock")
		s = substAll(t, haproxyCfg, s, []replacement{
			{"server node1 " + documentedUpstreams[0] + "\n", "server node1 " + up[0] + "\n", 1},
			{"server node2 " + documentedUpstreams[1] + "\n", "server node2 " + up[1] + "\n", 1},
			{"    bind :80\n", "    bind 127.0.0.1:" + httpPort + "\n", 1},
			{"    bind :443 ssl crt /etc/haproxy/certs/herald.pem ", "    bind 127.0.0.1:" + httpsPort + " ssl crt " + tl.combined + " ", 1},
			{"    log /dev/log local0\n", "    log stderr format raw local0\n", 1},
			{"/run/haproxy/admin.sock", stats, 3},
		})
		if idle > 0 {
			v := fmt.Sprintf("%ds\n", int(idle/time.Second))
			for _, k := range []string{"client", "server", "tunnel"} {
				s = subst(t, haproxyCfg, s, "    timeout "+k+" 75s\n", "    timeout "+k+" "+v, 1)
			}
		}
		if !isRoot() {
			// chroot and the switch to the haproxy user need root.
			for _, l := range []string{"    chroot /var/lib/haproxy\n", "    user haproxy\n", "    group haproxy\n"} {
				s = subst(t, haproxyCfg, s, l, "", 1)
			}
		}
		cfg := filepath.Join(dir, "haproxy.cfg")
		if err := os.WriteFile(cfg, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(haproxyBin, "-c", "-f", cfg).CombinedOutput(); err != nil {
			t.Fatalf("haproxy -c: %v\n%s", err, out)
		}
		p := &proxy{name: "haproxy", log: filepath.Join(dir, "haproxy.log"), stats: stats}
		p.accessLog = p.log // `log stderr`
		// -db: stay in the foreground, as Debian's unit does with -Ws.
		return p, []string{haproxyBin, "-db", "-f", cfg}
	})
}

// startOnFreePorts reads the configuration file, has build write the
// proxy's configuration from it (s) in dir for two free ports, HTTP and
// HTTPS, and starts the proxy with the args build returns. When a port
// was taken meanwhile (another process of the test run), it tries other
// ports, five times at most.
func startOnFreePorts(t *testing.T, file string, build func(s, dir, httpPort, httpsPort string) (*proxy, []string)) *proxy {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		httpPort, httpsPort := strconv.Itoa(testenv.FreePort(t)), strconv.Itoa(testenv.FreePort(t))
		p, args := build(string(raw), dir, httpPort, httpsPort)
		p.base, p.plain = "https://127.0.0.1:"+httpsPort, "http://127.0.0.1:"+httpPort
		err := startProxyProcess(t, p, args)
		if err == nil {
			return p
		}
		if attempt == 5 {
			t.Fatalf("%s: %v, five times", p.name, err)
		}
	}
}

// errPortTaken says a proxy could not bind a port freePort had found free:
// another process of the test run took it meanwhile.
var errPortTaken = errors.New("a listen port was taken")

// startProxyProcess runs args, stopped by its PID when the test ends, and
// waits until the proxy accepts connections. It returns errPortTaken when
// the proxy exited because a port was taken, so the caller can try others.
func startProxyProcess(t *testing.T, px *proxy, args []string) error {
	t.Helper()
	p := startProc(t, px.name, px.log, "", args...)
	t.Cleanup(func() {
		// Both stop at once on SIGTERM; nginx's master takes its workers
		// with it.
		if !p.stop(syscall.SIGTERM, 15*time.Second) {
			t.Errorf("%s did not stop within 15s of SIGTERM", px.name)
		}
	})
	deadline := time.Now().Add(waitBound)
	for {
		select {
		case <-p.done:
			if tail := fileTail(px.log); strings.Contains(tail, "in use") {
				return errPortTaken
			}
			t.Fatalf("%s exited: %v\n%s", px.name, p.err, fileTail(px.log))
		default:
		}
		c, err := net.DialTimeout("tcp", px.host(), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not accept on %s: %v\n%s", px.name, px.host(), err, fileTail(px.log))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// haproxyServerUp waits until HAProxy's health checks report the server
// with address addr UP (stats socket, `show stat`).
func haproxyServerUp(t *testing.T, p *proxy, addr string) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	last := ""
	for {
		status, err := haproxyStatus(p.stats, addr)
		if err == nil && status == "UP" {
			return
		}
		last = fmt.Sprint(status, err)
		if time.Now().After(deadline) {
			t.Fatalf("haproxy: server %s not UP within %v: %s", addr, waitBound, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func haproxyStatus(socket, addr string) (string, error) {
	c, err := net.DialTimeout("unix", socket, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "show stat\n"); err != nil {
		return "", err
	}
	raw, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	text := strings.TrimPrefix(string(raw), "# ")
	r := csv.NewReader(strings.NewReader(text))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil || len(rows) == 0 {
		return "", fmt.Errorf("show stat: %v: %q", err, raw)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, row := range rows[1:] {
		if len(row) > col["addr"] && row[col["addr"]] == addr {
			return row[col["status"]], nil
		}
	}
	return "", fmt.Errorf("no server %s in show stat", addr)
}

// ---- SSE client -------------------------------------------------------

type sseEvent struct {
	Comment         bool // a ": ping" heartbeat
	Event, ID, Data string
}

// sseStream is the shared test client's stream as these checks read it.
type sseStream struct {
	resp *http.Response
	sse  *testclient.SSE
}

// openSSE opens /v1/sse through the proxy. On a non-200 answer it returns
// the status and body and no stream.
func openSSE(t *testing.T, client *http.Client, url, token, lastEventID string) (*sseStream, int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	// Asked for explicitly: the answer must still come uncompressed.
	req.Header.Set("Accept-Encoding", "gzip")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	sse, err := testclient.OpenSSE(client, req, testclient.SSEOptions{})
	if err != nil {
		var refused *testclient.StatusError
		if errors.As(err, &refused) {
			return nil, refused.Status, refused.Body
		}
		return nil, 0, err.Error()
	}
	t.Cleanup(sse.Close)
	return &sseStream{resp: sse.Resp, sse: sse}, http.StatusOK, ""
}

func (s *sseStream) Close() { s.sse.Close() }

// next returns the next event or heartbeat (the retry field is skipped);
// ok is false when the stream ended. It fails the test after d.
func (s *sseStream) next(t *testing.T, d time.Duration) (sseEvent, bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ev, err := s.sse.Next(time.Until(deadline))
		switch {
		case errors.Is(err, testclient.ErrEnded):
			return sseEvent{}, false
		case err != nil:
			t.Fatalf("nothing on the SSE stream within %v", d)
		case ev.Heartbeat():
			return sseEvent{Comment: true, Data: ": " + strings.Join(ev.Comments, " ")}, true
		case ev.Name != "" || ev.Data != "":
			return sseEvent{Event: ev.Name, ID: ev.ID, Data: ev.Data}, true
		}
	}
}

// publication skips heartbeats and control events and returns the next
// publication and its cursor; it fails if the stream ends first.
func (s *sseStream) publication(t *testing.T, d time.Duration) (fanout.Publication, string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ev, ok := s.next(t, time.Until(deadline))
		if !ok {
			t.Fatal("the SSE stream ended before a publication")
		}
		if ev.Comment || ev.Event != "" {
			if ev.Event == "disconnect" {
				t.Fatalf("SSE disconnect: %s", ev.Data)
			}
			continue
		}
		e, err := fanout.DecodeEnvelope([]byte(ev.Data))
		if err != nil {
			t.Fatalf("publication: %v: %s", err, ev.Data)
		}
		return e, ev.ID
	}
}

// subscribed returns the data of the stream's subscribed event.
func (s *sseStream) subscribed(t *testing.T) string {
	t.Helper()
	for {
		ev, ok := s.next(t, 10*time.Second)
		if !ok {
			t.Fatal("the SSE stream ended before its subscribed event")
		}
		if ev.Event == "subscribed" {
			return ev.Data
		}
	}
}

// ---- WebSocket client -------------------------------------------------

type wsFrame map[string]json.RawMessage

func (f wsFrame) str(k string) string {
	var s string
	_ = json.Unmarshal(f[k], &s)
	return s
}

// parseFrame reads one server frame; nil for a line that is not JSON.
func parseFrame(line []byte) wsFrame {
	var f wsFrame
	if json.Unmarshal(line, &f) != nil {
		return nil
	}
	return f
}

// wsClient is the shared test client answering pings, as these checks
// use it.
type wsClient struct {
	*testclient.WS[wsFrame]
	nextID int
}

// dialWS opens /v1/ws through the proxy as a browser page of the proxy's
// own origin would. It returns the error rather than failing, for retries.
func dialWS(t *testing.T, client *http.Client, p *proxy) (*wsClient, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, resp, err := testclient.DialWS(ctx, p.base+"/v1/ws", testclient.WSOptions{
		HTTPClient: client, Header: http.Header{"Origin": []string{p.base}}, Buffer: 4096, AnswerPings: true,
	}, parseFrame)
	if err != nil {
		if resp != nil {
			b, _ := io.ReadAll(resp.Body)
			return nil, fmt.Errorf("%w: %s %s", err, resp.Status, b)
		}
		return nil, err
	}
	t.Cleanup(ws.Close)
	return &wsClient{WS: ws}, nil
}

// request sends op with fields and returns its reply's result; an error
// reply fails the test.
func (w *wsClient) request(t *testing.T, op string, fields map[string]any) wsFrame {
	t.Helper()
	w.nextID++
	id := w.nextID
	msg := map[string]any{"id": id, "op": op}
	for k, v := range fields {
		msg[k] = v
	}
	b, _ := json.Marshal(msg)
	if err := w.Send(b); err != nil {
		t.Fatalf("websocket %s: %v", op, err)
	}
	want := strconv.Itoa(id)
	for {
		f := w.frame(t, 10*time.Second)
		if string(f["id"]) != want {
			continue
		}
		if e, ok := f["error"]; ok {
			t.Fatalf("websocket %s: error %s", op, e)
		}
		var res wsFrame
		_ = json.Unmarshal(f["result"], &res)
		return res
	}
}

// frame returns the next frame; the connection ending fails the test.
func (w *wsClient) frame(t *testing.T, d time.Duration) wsFrame {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		f, err := w.Next(time.Until(deadline))
		switch {
		case errors.Is(err, testclient.ErrEnded):
			t.Fatal("the WebSocket connection ended")
		case err != nil:
			t.Fatalf("no WebSocket frame within %v", d)
		case f == nil:
			continue // not JSON
		case f.str("push") == "disconnect":
			t.Fatalf("WebSocket disconnect: %v", f)
		}
		return f
	}
}

// publication returns the next pub push.
func (w *wsClient) publication(t *testing.T, d time.Duration) fanout.Publication {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		f := w.frame(t, time.Until(deadline))
		if f.str("push") != "pub" {
			continue
		}
		// A pub push is the envelope with "push" in front.
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		e, err := fanout.DecodeEnvelope(b)
		if err != nil {
			t.Fatalf("pub push: %v: %s", err, b)
		}
		return e
	}
}

// ---- the checks -------------------------------------------------------

// checkRedirect: plain HTTP answers only with a redirect to HTTPS.
func checkRedirect(t *testing.T, p *proxy) {
	resp, err := httpGet(p.plain + "/v1/sse?channel=orders/1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPermanentRedirect || !strings.HasPrefix(resp.Header.Get("Location"), "https://127.0.0.1") {
		t.Fatalf("plain HTTP: %s Location %q, want 308 to https://", resp.Status, resp.Header.Get("Location"))
	}
}

func httpGet(url string) (*http.Response, error) {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp, nil
}

// recorder is an HTTP server standing where a node would, recording what
// the proxy sends it: the proxy's request headers are the object here.
type recorder struct {
	addr string
	reqs chan *http.Request
}

func startRecorder(t *testing.T) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{addr: ln.Addr().String(), reqs: make(chan *http.Request, 64)}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case rec.reqs <- r.Clone(context.Background()):
		default:
		}
		w.WriteHeader(http.StatusOK)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return rec
}

func (rec *recorder) next(t *testing.T, path string) *http.Request {
	t.Helper()
	for {
		select {
		case r := <-rec.reqs:
			if r.URL.Path == "/metrics" || strings.HasPrefix(r.URL.Path, "/ops/") {
				t.Errorf("%s reached a node through the proxy", r.URL.Path)
			}
			if r.URL.Path == path {
				return r
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no request for %s reached the node", path)
		}
	}
}

// checkForwardedHeaders: the proxy speaks HTTP/1.1 to the node, passes the
// Host with its port, replaces X-Forwarded-For (a client cannot forge it)
// and sets X-Forwarded-Proto and Forwarded; an upgrade request carries
// Upgrade and Connection; /metrics never reaches a node.
func checkForwardedHeaders(t *testing.T, p *proxy, rec *recorder, cl clients) {
	host := p.host()
	for _, c := range []struct {
		name   string
		client *http.Client
		path   string
		header http.Header
	}{
		{"sse over HTTP/2", cl.sse, "/v1/sse", http.Header{"X-Forwarded-For": {"203.0.113.9"}, "Forwarded": {"for=203.0.113.9"}}},
		{"websocket upgrade", cl.ws, "/v1/ws", http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"},
			"Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}, "Sec-Websocket-Protocol": {"herald.v1"}}},
	} {
		req, _ := http.NewRequest(http.MethodGet, p.base+c.path+"?channel=orders/1", nil)
		for k, v := range c.header {
			req.Header[k] = v
		}
		resp, err := c.client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r := rec.next(t, c.path)
		if r.Proto != "HTTP/1.1" {
			t.Errorf("%s: the node got %s, want HTTP/1.1", c.name, r.Proto)
		}
		if r.Host != host {
			t.Errorf("%s: Host %q, want %q (with the port, for the Origin check)", c.name, r.Host, host)
		}
		if got := r.Header.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "127.0.0.1" {
			t.Errorf("%s: X-Forwarded-For %q, want exactly the client's 127.0.0.1", c.name, got)
		}
		if got := r.Header.Get("X-Forwarded-Proto"); got != "https" {
			t.Errorf("%s: X-Forwarded-Proto %q", c.name, got)
		}
		if got, want := r.Header.Values("Forwarded"), `for="127.0.0.1";proto=https;host="`+host+`"`; len(got) != 1 || got[0] != want {
			t.Errorf("%s: Forwarded %q, want %q", c.name, got, want)
		}
		if c.path == "/v1/ws" {
			if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
				t.Errorf("websocket: Upgrade %q Connection %q reached the node, want websocket / upgrade", r.Header.Get("Upgrade"), r.Header.Get("Connection"))
			}
		}
	}
	for _, path := range []string{"/metrics", "/ops/", "/ops/status"} {
		resp, err := cl.sse.Get(p.base + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s through the proxy: %s, want 404", path, resp.Status)
		}
	}
	// A request that passes, to flush the recorder: nothing before it.
	resp, err := cl.sse.Get(p.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rec.next(t, "/healthz")
}

// checkSSE: over HTTP/2 through the proxy, uncompressed, each publication
// arrives on its own while the stream stays open.
func checkSSE(t *testing.T, c *cluster, p *proxy, cl clients) {
	ch := "orders/sse"
	s, status, body := openSSE(t, cl.sse, p.base+"/v1/sse?channel="+ch, mintToken(t, "orders/*"), "")
	if s == nil {
		t.Fatalf("SSE through %s: %d %s", p.name, status, body)
	}
	if s.resp.ProtoMajor != 2 {
		t.Errorf("SSE through %s over %s, want HTTP/2", p.name, s.resp.Proto)
	}
	if ce := s.resp.Header.Get("Content-Encoding"); ce != "" {
		t.Errorf("SSE through %s came with Content-Encoding %q: compressed streams hold events back", p.name, ce)
	}
	if ct := s.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	s.subscribed(t)
	for i := 1; i <= 3; i++ {
		id := c.publish(t, ch, i)
		published := time.Now()
		e, _ := s.publication(t, 10*time.Second)
		if e.ID != id || e.Offset != uint64(i) {
			t.Fatalf("publication %d: got %+v, want %s at offset %d", i, e, id, i)
		}
		if d := time.Since(published); d > 5*time.Second {
			t.Errorf("publication %d took %v through %s", i, d, p.name)
		}
	}
	// The stream is still open: a heartbeat follows the last event.
	for {
		ev, ok := s.next(t, 5*testHeartbeat)
		if !ok {
			t.Fatal("the stream closed after the publications")
		}
		if ev.Comment {
			break
		}
	}
}

// checkWebSocket: upgrade, connect, subscribe and receive through the proxy;
// and a plain GET of /v1/ws is still refused with 426 by the node.
func checkWebSocket(t *testing.T, c *cluster, p *proxy, cl clients) {
	ch := "orders/ws"
	w, err := dialWS(t, cl.ws, p)
	if err != nil {
		t.Fatalf("WebSocket through %s: %v", p.name, err)
	}
	res := w.request(t, "connect", map[string]any{"token": mintToken(t, "orders/*")})
	if res.str("protocol") != "herald.v1" {
		t.Fatalf("connect result %v", res)
	}
	w.request(t, "subscribe", map[string]any{"channel": ch})
	for i := 1; i <= 2; i++ {
		id := c.publish(t, ch, i)
		e := w.publication(t, 10*time.Second)
		if e.ID != id || e.Offset != uint64(i) {
			t.Fatalf("publication %d: got %+v, want %s at offset %d", i, e, id, i)
		}
	}
	resp, err := cl.sse.Get(p.base + "/v1/ws")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("GET /v1/ws without an upgrade: %s, want 426 from the node", resp.Status)
	}
}

// fromAddr is an HTTPS client whose connections leave from the loopback
// address ip (Linux routes all of 127.0.0.0/8 to lo).
func fromAddr(t *testing.T, tl tlsFiles, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, TLSClientConfig: &tls.Config{RootCAs: tl.pool}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// checkClientLimits: behind the proxy, whose address the nodes list in
// --trusted-proxies, the per-address attempt limit counts each client,
// not the proxy. Client A (127.0.0.2) goes over it and is refused with
// 429; client B (127.0.0.3), asking now and then, never is. Were the
// nodes counting the proxy's address, B would share A's refusals.
func checkClientLimits(t *testing.T, p *proxy, tl tlsFiles) {
	a, b := fromAddr(t, tl, "127.0.0.2"), fromAddr(t, tl, "127.0.0.3")
	attempt := func(c *http.Client) int {
		// Without a token: refused (401), but counted as an attempt.
		resp, err := c.Post(p.base+"/v1/tickets", "application/json", nil)
		if err != nil {
			t.Errorf("POST /v1/tickets: %v", err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	refusedA := 0
	// At most 40 rounds: B's 40 attempts stay within its own burst.
	for round := 0; round < 40 && refusedA < 8; round++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 8 {
			wg.Go(func() {
				if attempt(a) == http.StatusTooManyRequests {
					mu.Lock()
					refusedA++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		switch code := attempt(b); code {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			t.Fatalf("client B refused with 429 while only client A went over the limit (round %d): the nodes count the proxy's address, not the client's", round)
		default:
			t.Fatalf("client B: status %d, want 401", code)
		}
	}
	if refusedA == 0 {
		t.Fatal("client A was never refused with 429: the per-address limit did not apply to it")
	}
}

// checkAccessLog: the proxy logs requests without their query strings,
// where tickets and tokens travel.
func checkAccessLog(t *testing.T, p *proxy, cl clients) {
	const marker = "tkt-must-not-be-logged"
	resp, err := cl.sse.Get(p.base + "/v1/sse?channel=orders/log&ticket=" + marker)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an unknown ticket: %s, want 401", resp.Status)
	}
	deadline := time.Now().Add(waitBound)
	for {
		b, _ := os.ReadFile(p.accessLog)
		if strings.Contains(string(b), marker) {
			t.Fatalf("the ticket is in %s's access log:\n%s", p.name, b)
		}
		if strings.Contains(string(b), "GET /v1/sse ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access log line for GET /v1/sse in %s:\n%s", p.accessLog, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holdUntil is how long the idle checks keep a quiet stream open: several
// of the proxy's (substituted) idle timeouts.
const idleHold = 4 * shortIdleTimeout

// checkIdleSSE: a stream with nothing to deliver outlives the proxy's idle
// timeout, kept alive by the heartbeats it sees, and still delivers.
func checkIdleSSE(t *testing.T, c *cluster, p *proxy, cl clients) {
	ch := "orders/idle-sse"
	s, status, body := openSSE(t, cl.sse, p.base+"/v1/sse?channel="+ch, mintToken(t, "orders/*"), "")
	if s == nil {
		t.Fatalf("SSE: %d %s", status, body)
	}
	s.subscribed(t)
	start := time.Now()
	pings := 0
	for time.Since(start) < idleHold {
		ev, ok := s.next(t, shortIdleTimeout)
		if !ok {
			t.Fatalf("the idle stream was closed after %v (proxy idle timeout %v), %d heartbeats seen\n%s",
				time.Since(start).Round(time.Millisecond), shortIdleTimeout, pings, fileTail(p.log))
		}
		if !ev.Comment {
			t.Fatalf("unexpected event on the idle stream: %+v", ev)
		}
		pings++
	}
	if min := int(idleHold/testHeartbeat) / 2; pings < min {
		t.Errorf("%d heartbeats in %v, want at least %d", pings, idleHold, min)
	}
	id := c.publish(t, ch, 1)
	if e, _ := s.publication(t, 10*time.Second); e.ID != id {
		t.Fatalf("after idling: got %+v, want %s", e, id)
	}
}

// checkIdleWebSocket: the same for a WebSocket answering Herald's pings.
func checkIdleWebSocket(t *testing.T, c *cluster, p *proxy, cl clients) {
	ch := "orders/idle-ws"
	w, err := dialWS(t, cl.ws, p)
	if err != nil {
		t.Fatal(err)
	}
	w.request(t, "connect", map[string]any{"token": mintToken(t, "orders/*")})
	w.request(t, "subscribe", map[string]any{"channel": ch})
	start := time.Now()
	pings := 0
	for time.Since(start) < idleHold {
		select {
		case <-w.Pings():
			pings++
		case f, ok := <-w.Frames():
			if !ok {
				t.Fatalf("the idle WebSocket was closed after %v (proxy idle timeout %v), %d pings seen\n%s",
					time.Since(start).Round(time.Millisecond), shortIdleTimeout, pings, fileTail(p.log))
			}
			t.Fatalf("unexpected frame on the idle WebSocket: %v", f)
		case <-time.After(shortIdleTimeout):
			t.Fatalf("no ping within %v", shortIdleTimeout)
		}
	}
	if min := int(idleHold/testHeartbeat) / 2; pings < min {
		t.Errorf("%d pings in %v, want at least %d", pings, idleHold, min)
	}
	id := c.publish(t, ch, 1)
	if e := w.publication(t, 10*time.Second); e.ID != id {
		t.Fatalf("after idling: got %+v, want %s", e, id)
	}
}

// retry calls f with client-style backoff until it succeeds or 30 s pass.
func retry(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	delay := 100 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, waitBound, err)
		}
		time.Sleep(delay)
		delay = min(2*delay, 2*time.Second)
	}
}

// restartNode restarts n and waits until the proxy sees it again.
func restartNode(t *testing.T, p *proxy, n *node) {
	t.Helper()
	n.start(t)
	if p.stats != "" {
		haproxyServerUp(t, p, n.addr)
	}
}

// checkRestartSSE: the node holding a stream dies; the client reconnects
// through the proxy with Last-Event-ID and gets what was published
// meanwhile, in order, with no gap. Then the node comes back.
func checkRestartSSE(t *testing.T, c *cluster, p *proxy, cl clients) {
	ch := "orders/restart-sse"
	tok := mintToken(t, "orders/*")
	url := p.base + "/v1/sse?channel=" + ch
	s, status, body := openSSE(t, cl.sse, url, tok, "")
	if s == nil {
		t.Fatalf("SSE: %d %s", status, body)
	}
	s.subscribed(t)
	first := c.publish(t, ch, 1)
	e, cursor := s.publication(t, 10*time.Second)
	if e.ID != first {
		t.Fatalf("got %+v, want %s", e, first)
	}
	victim := c.holder(t, "sse")
	victim.kill()
	for {
		ev, ok := s.next(t, 15*time.Second)
		if !ok {
			break
		}
		if !ev.Comment {
			t.Fatalf("after the node died: %+v", ev)
		}
	}
	// In the history before the client comes back: the resume replays them.
	want := c.publishWhileAway(t, ch)
	var s2 *sseStream
	retry(t, "SSE reconnect through "+p.name, func() error {
		var status int
		var body string
		s2, status, body = openSSE(t, cl.sse, url, tok, cursor)
		if s2 == nil {
			return fmt.Errorf("%d %s", status, body)
		}
		return nil
	})
	var sub struct {
		Recovered bool   `json:"recovered"`
		Offset    uint64 `json:"offset"`
	}
	if raw := s2.subscribed(t); json.Unmarshal([]byte(raw), &sub) != nil || !sub.Recovered || sub.Offset != e.Offset+3 {
		t.Fatalf("resume after %s died: %s, want recovered up to offset %d", victim.name, raw, e.Offset+3)
	}
	for i, id := range want {
		got, _ := s2.publication(t, 20*time.Second)
		if got.ID != id || got.Offset != e.Offset+uint64(i)+1 || got.Epoch != e.Epoch {
			t.Fatalf("after resume, publication %d: %+v, want %s at offset %d epoch %s", i+2, got, id, e.Offset+uint64(i)+1, e.Epoch)
		}
	}
	restartNode(t, p, victim)
}

// checkRestartWebSocket: the same for a WebSocket resuming with since.
func checkRestartWebSocket(t *testing.T, c *cluster, p *proxy, cl clients) {
	ch := "orders/restart-ws"
	tok := mintToken(t, "orders/*")
	w, err := dialWS(t, cl.ws, p)
	if err != nil {
		t.Fatal(err)
	}
	w.request(t, "connect", map[string]any{"token": tok})
	w.request(t, "subscribe", map[string]any{"channel": ch})
	first := c.publish(t, ch, 1)
	e := w.publication(t, 10*time.Second)
	if e.ID != first {
		t.Fatalf("got %+v, want %s", e, first)
	}
	victim := c.holder(t, "ws")
	victim.kill()
	for ended := false; !ended; {
		select {
		case _, ok := <-w.Frames():
			ended = !ok
		case <-time.After(15 * time.Second):
			t.Fatal("the WebSocket stayed open after its node died")
		}
	}
	want := c.publishWhileAway(t, ch)
	var w2 *wsClient
	retry(t, "WebSocket reconnect through "+p.name, func() error {
		var err error
		w2, err = dialWS(t, cl.ws, p)
		return err
	})
	w2.request(t, "connect", map[string]any{"token": tok})
	res := w2.request(t, "subscribe", map[string]any{"channel": ch,
		"since": map[string]any{"offset": e.Offset, "epoch": e.Epoch}})
	if string(res["recovered"]) != "true" || string(res["offset"]) != strconv.FormatUint(e.Offset+3, 10) {
		t.Fatalf("resume after %s died: %v, want recovered up to offset %d", victim.name, res, e.Offset+3)
	}
	for i, id := range want {
		got := w2.publication(t, 20*time.Second)
		if got.ID != id || got.Offset != e.Offset+uint64(i)+1 || got.Epoch != e.Epoch {
			t.Fatalf("after resume, publication %d: %+v, want %s at offset %d epoch %s", i+2, got, id, e.Offset+uint64(i)+1, e.Epoch)
		}
	}
	restartNode(t, p, victim)
}

// waitBound bounds the test's waits for an event (a proxy accepting, a
// server counted UP, records dispatched): a failure bound a busy machine
// does not reach, not a budget.
const waitBound = 2 * time.Minute
