package deploy

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heraldgw/herald/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	containerfile = "container/Containerfile"
	unitFile      = "systemd/herald.service"
	envFile       = "systemd/herald.env"
	testVersion   = "v0.0.0-deploytest"
)

// recipe is what the tests read from the Containerfile.
type recipe struct {
	buildEnv   []string          // NAME=value before `go build` in the RUN line
	buildArgs  []string          // go build's arguments, ${VERSION} expanded
	env        map[string]string // the final stage's ENV
	user       string
	volume     string
	expose     string
	entrypoint []string
	cmd        []string
	passwd     string // the passwd line the build stage writes
}

// instructions returns the Containerfile's instructions, continuation
// lines joined and comments dropped.
func instructions(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var cur strings.Builder
	for line := range strings.SplitSeq(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if rest, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(trimmed)
		out = append(out, cur.String())
		cur.Reset()
	}
	return out
}

// shellWords splits a command line as sh would for the plain words,
// single- and double-quoted strings the recipe uses.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

func readRecipe(t *testing.T) recipe {
	t.Helper()
	r := recipe{env: map[string]string{}}
	final := false
	for _, ins := range instructions(t, containerfile) {
		op, rest, _ := strings.Cut(ins, " ")
		switch op {
		case "FROM":
			final = strings.HasPrefix(rest, "scratch")
		case "RUN":
			words := shellWords(t, rest)
			i := slices.Index(words, "go")
			if i >= 0 && i+1 < len(words) && words[i+1] == "build" {
				if r.buildArgs != nil {
					t.Fatal("two go build lines")
				}
				r.buildEnv = words[:i]
				for _, a := range words[i+1:] {
					r.buildArgs = append(r.buildArgs, strings.ReplaceAll(a, "${VERSION}", testVersion))
				}
			}
			if j := strings.Index(rest, "> /out/root/etc/passwd"); j >= 0 {
				w := shellWords(t, rest[:j])
				r.passwd = w[len(w)-1]
			}
		case "ENV":
			if !final {
				continue
			}
			for _, kv := range shellWords(t, rest) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("ENV %q: want NAME=value pairs", rest)
				}
				r.env[k] = v
			}
		case "USER":
			r.user = rest
		case "VOLUME":
			r.volume = rest
		case "EXPOSE":
			r.expose = rest
		case "ENTRYPOINT", "CMD":
			var args []string
			if err := json.Unmarshal([]byte(rest), &args); err != nil {
				t.Fatalf("%s %s: want the JSON (exec) form: %v", op, rest, err)
			}
			if op == "CMD" {
				r.cmd = args
			} else {
				r.entrypoint = args
			}
		}
	}
	return r
}

// unit is the [Service] section of the systemd unit: every key's values.
func readUnit(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	svc := map[string][]string{}
	section := ""
	for line := range strings.SplitSeq(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q is not key=value", unitFile, line)
			}
			svc[k] = append(svc[k], v)
		}
	}
	return svc
}

func one(t *testing.T, svc map[string][]string, key string) string {
	t.Helper()
	if len(svc[key]) != 1 {
		t.Fatalf("%s: want one %s=, have %q", unitFile, key, svc[key])
	}
	return svc[key][0]
}

// moduleRoot is the directory of go.mod, where the image's build runs.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		t.Fatal("not inside a module")
	}
	return filepath.Dir(mod)
}

// buildAsRecipe runs the Containerfile's go build line at the module root,
// writing the binary into a temp dir instead of /out.
func buildAsRecipe(t *testing.T, r recipe) string {
	t.Helper()
	if len(r.buildArgs) == 0 {
		t.Fatalf("%s has no go build line", containerfile)
	}
	bin := filepath.Join(t.TempDir(), "herald")
	args := slices.Clone(r.buildArgs)
	i := slices.Index(args, "-o")
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("go build line %q has no -o", args)
	}
	args[i+1] = bin
	cmd := exec.Command("go", args...)
	cmd.Dir = moduleRoot(t)
	cmd.Env = append(os.Environ(), r.buildEnv...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// serveSettings are the HERALD_ variables of `herald serve`, from genconfig.
func serveSettings(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, err := exec.Command(bin, "genconfig", "--comments=false", "serve").Output()
	if err != nil {
		t.Fatalf("herald genconfig: %v", err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(out, &keys); err != nil {
		t.Fatalf("herald genconfig: %v\n%s", err, out)
	}
	vars := map[string]bool{"HERALD_CONFIG": true}
	for k := range keys {
		vars["HERALD_"+strings.ToUpper(strings.ReplaceAll(k, "-", "_"))] = true
	}
	return vars
}

// runUntilReady starts bin with exactly env, in an empty working directory
// (the container's read-only /), waits for /readyz 200, stops it with
// SIGTERM and wants a clean exit. It returns nothing: failures end the test.
func runUntilReady(t *testing.T, bin string, args, env []string, listen string) {
	t.Helper()
	cwd := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = cwd, env
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for ready := false; !ready; {
		select {
		case err := <-exited:
			t.Fatalf("herald %s exited before ready: %v\n%s", strings.Join(args, " "), err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("/readyz not 200 after 30s\n%s", out.String())
		}
		resp, err := client.Get("http://" + listen + "/readyz")
		if err == nil {
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
		if !ready {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("herald did not exit cleanly on SIGTERM: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("herald did not stop within 30s of SIGTERM\n%s", out.String())
	}
	if ents, _ := os.ReadDir(cwd); len(ents) > 0 {
		t.Errorf("herald wrote %s into its working directory; in the image that is the read-only /", ents[0].Name())
	}
}

// TestContainerRecipe reads the Containerfile's settings: the ones the
// image test below relies on, and their agreement with each other.
func TestContainerRecipe(t *testing.T) {
	r := readRecipe(t)
	if !slices.Equal(r.buildEnv, []string{"CGO_ENABLED=0"}) {
		t.Errorf("go build runs with %q, want CGO_ENABLED=0 (a static binary for FROM scratch)", r.buildEnv)
	}
	for _, want := range []string{"-trimpath", "-s -w -X main.version=" + testVersion, "./cmd/herald"} {
		if !slices.Contains(r.buildArgs, want) {
			t.Errorf("go build %q lacks %q", r.buildArgs, want)
		}
	}
	if !slices.Equal(r.entrypoint, []string{"/herald"}) || !slices.Equal(r.cmd, []string{"serve"}) {
		t.Errorf(`ENTRYPOINT %q CMD %q, want ["/herald"] ["serve"]`, r.entrypoint, r.cmd)
	}
	if r.user != "65532:65532" || !strings.HasPrefix(r.passwd, "herald:x:65532:65532:") {
		t.Errorf("USER %q with passwd line %q: want 65532:65532 and its entry", r.user, r.passwd)
	}
	if r.env["HERALD_DATA_DIR"] == "" || r.env["HERALD_DATA_DIR"] != r.volume {
		t.Errorf("HERALD_DATA_DIR %q is not the VOLUME %q", r.env["HERALD_DATA_DIR"], r.volume)
	}
	host, port, err := net.SplitHostPort(r.env["HERALD_LISTEN"])
	if err != nil || host != "0.0.0.0" || port != r.expose {
		t.Errorf("HERALD_LISTEN %q, EXPOSE %q: want 0.0.0.0 and the exposed port", r.env["HERALD_LISTEN"], r.expose)
	}
}

// TestContainerImageBinary builds the binary exactly as the image's build
// stage does, checks it is static, and runs it as the image would: the
// ENV's variables and nothing else, ENTRYPOINT and CMD, an empty data
// directory. Only the listen address changes, to a free loopback port.
func TestContainerImageBinary(t *testing.T) {
	r := readRecipe(t)
	bin := buildAsRecipe(t, r)

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter (PT_INTERP): it is dynamically linked and cannot run FROM scratch")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %q", libs)
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: not linked with -s")
	}
	f.Close()
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range bi.Settings {
		got[s.Key] = s.Value
	}
	// With -trimpath the Go tool does not record -ldflags; -s shows as a
	// missing symbol table and -X in `herald version` below.
	if got["CGO_ENABLED"] != "0" || got["-trimpath"] != "true" {
		t.Errorf("build settings CGO_ENABLED=%q -trimpath=%q", got["CGO_ENABLED"], got["-trimpath"])
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "herald "+testVersion+"\n") {
		t.Fatalf("herald version: %q, %v; want herald %s", out, err, testVersion)
	}

	vars := serveSettings(t, bin)
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	listen := testenv.FreeAddr(t)
	var env []string
	for k, v := range r.env {
		if !vars[k] {
			t.Errorf("ENV %s is not a setting of herald serve", k)
		}
		switch k {
		case "HERALD_LISTEN":
			v = listen
		case "HERALD_DATA_DIR":
			v = dataDir
		}
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	if want := []string{"HERALD_DATA_DIR=" + dataDir, "HERALD_LISTEN=" + listen}; !slices.Equal(env, want) {
		t.Fatalf("environment %q, want exactly %q", env, want)
	}
	runUntilReady(t, bin, append(slices.Clone(r.entrypoint[1:]), r.cmd...), env, listen)
	if _, err := os.Stat(filepath.Join(dataDir, "herald.db")); err != nil {
		t.Errorf("the embedded store is not in HERALD_DATA_DIR: %v", err)
	}
}

// TestSystemdUnit reads the unit's settings and runs the binary as its
// ExecStart, with its Environment= variables: the state directory becomes
// a temp dir, the listen port a free one.
func TestSystemdUnit(t *testing.T) {
	svc := readUnit(t)
	if one(t, svc, "EnvironmentFile") != "/etc/herald/herald.env" {
		t.Errorf("EnvironmentFile=%s, want /etc/herald/herald.env", svc["EnvironmentFile"][0])
	}
	state := one(t, svc, "StateDirectory")
	if one(t, svc, "DynamicUser") != "yes" {
		t.Error("want DynamicUser=yes")
	}
	for _, k := range []string{"NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp"} {
		if len(svc[k]) == 0 {
			t.Errorf("no %s=", k)
		}
	}
	exec := strings.Fields(one(t, svc, "ExecStart"))
	if len(exec) != 2 || exec[0] != "/usr/local/bin/herald" || exec[1] != readRecipe(t).cmd[0] {
		t.Fatalf("ExecStart=%q, want /usr/local/bin/herald and the image's command", exec)
	}

	bin := buildAsRecipe(t, readRecipe(t))
	vars := serveSettings(t, bin)
	stateRoot := t.TempDir() // %S, where systemd makes StateDirectory
	if err := os.Mkdir(filepath.Join(stateRoot, state), 0o700); err != nil {
		t.Fatal(err)
	}
	listen := testenv.FreeAddr(t)
	env := map[string]string{}
	for _, kv := range svc["Environment"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !vars[k] {
			t.Errorf("Environment=%s is not a setting of herald serve", kv)
		}
		env[k] = strings.ReplaceAll(v, "%S", stateRoot)
	}
	if want := filepath.Join(stateRoot, state); env["HERALD_DATA_DIR"] != want {
		t.Fatalf("HERALD_DATA_DIR=%q is not the StateDirectory %s", env["HERALD_DATA_DIR"], want)
	}
	if host, _, err := net.SplitHostPort(env["HERALD_LISTEN"]); err != nil || host != "127.0.0.1" {
		t.Errorf("HERALD_LISTEN=%q: want loopback behind a proxy", env["HERALD_LISTEN"])
	}
	env["HERALD_LISTEN"] = listen
	var envList []string
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	runUntilReady(t, bin, exec[1:], envList, listen)
	if _, err := os.Stat(filepath.Join(env["HERALD_DATA_DIR"], "herald.db")); err != nil {
		t.Errorf("the embedded store is not in the state directory: %v", err)
	}
}

// TestSystemdEnvFile: every variable the example environment file names,
// set or commented out, is a setting of herald serve.
func TestSystemdEnvFile(t *testing.T) {
	bin := buildAsRecipe(t, readRecipe(t))
	vars := serveSettings(t, bin)
	f, err := os.Open(envFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimPrefix(strings.TrimSpace(sc.Text()), "#")
		k, _, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(k, "HERALD_") || strings.ContainsAny(k, " <") {
			continue
		}
		n++
		if !vars[k] {
			t.Errorf("%s names %s, not a setting of herald serve", envFile, k)
		}
	}
	if n == 0 {
		t.Fatalf("%s names no HERALD_ variable", envFile)
	}
}
