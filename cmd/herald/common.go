package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/heraldgw/herald/outboxfeed/outboxdb"

	"github.com/jackc/pgx/v5/pgxpool"
)

// defaultDataDir is the default --data-dir.
const defaultDataDir = "./herald-data"

// storeSettings select the outbox store.
type storeSettings struct {
	DatabaseURL string
	DataDir     string
}

func (s *storeSettings) register(st *settings) {
	st.String(&s.DataDir, "data-dir", defaultDataDir, "directory for the embedded store, the development secret and the in-memory broker's history log (history/)")
	st.String(&s.DatabaseURL, "database-url", "", "outbox store: a postgres:// or postgresql:// URL selects PostgreSQL (anything else is refused); empty = embedded SQLite file <data-dir>/herald.db")
	st.checks = append(st.checks, func() error { return s.check(st.source("database-url")) })
}

// check refuses a --database-url that is not a PostgreSQL URL: the
// embedded store is chosen by leaving it empty, never by a path or a
// mistyped scheme, so a typo cannot put a node on a store of its own.
func (s *storeSettings) check(from origin) error {
	if s.DatabaseURL == "" {
		return nil
	}
	where := from.named("--database-url")
	if !outboxdb.IsPostgresURL(s.DatabaseURL) {
		return fmt.Errorf("config: %s %q is not a PostgreSQL URL: give postgres://USER@HOST:5432/DATABASE (or postgresql://…); "+
			"for the embedded SQLite store leave --database-url empty and choose its directory with --data-dir",
			where, redactURL(s.DatabaseURL))
	}
	if _, err := pgxpool.ParseConfig(s.DatabaseURL); err != nil {
		return fmt.Errorf("config: %s: %v", where, err)
	}
	return nil
}

// url is the effective store URL.
func (s *storeSettings) url() string {
	if s.DatabaseURL != "" {
		return s.DatabaseURL
	}
	return filepath.Join(s.DataDir, "herald.db")
}

func (s *storeSettings) isPostgres() bool {
	return outboxdb.IsPostgresURL(s.DatabaseURL)
}

// createDataDirFlag is the flag that lets publish and migrate create an
// embedded store.
const createDataDirFlag = "create-data-dir"

// registerCreate registers --create-data-dir (given per invocation).
func (s *storeSettings) registerCreate(st *settings, create *bool) {
	st.invocation(func() {
		st.Bool(create, createDataDirFlag, false, "embedded store: create --data-dir and its SQLite outbox when missing (without it, a missing one is an error)")
	})
}

// checkExisting refuses, unless create, an embedded store whose data
// directory does not exist or holds no outbox: a command run in the wrong
// directory, or without the nodes' --database-url, would otherwise make a
// new outbox that no node reads. createHint says what create would do ("",
// for commands that never create one). PostgreSQL passes.
func (s *storeSettings) checkExisting(create bool, createHint string) error {
	if s.isPostgres() || create {
		return nil
	}
	_, err := os.Stat(s.url())
	if err == nil {
		return nil
	}
	if !os.IsNotExist(err) {
		return fmt.Errorf("outbox: %w", err)
	}
	where, _ := filepath.Abs(s.DataDir)
	if !filepath.IsAbs(s.DataDir) {
		where += fmt.Sprintf(" (--data-dir %s, relative to the current directory)", shellQuote(s.DataDir))
	}
	what := "holds no outbox (" + filepath.Base(s.url()) + ")"
	if _, err := os.Stat(s.DataDir); os.IsNotExist(err) {
		what = "does not exist"
	}
	msg := fmt.Sprintf("no outbox: the data directory %s %s. Run this where the nodes' data directory is, or pass theirs with --data-dir, "+
		"or their PostgreSQL with --database-url", where, what)
	if createHint != "" {
		msg += "; --" + createDataDirFlag + " " + createHint
	}
	return errors.New(msg)
}

// logSettings configure log/slog.
type logSettings struct {
	Level  string
	Format string
}

func (l *logSettings) register(st *settings) {
	st.String(&l.Level, "log-level", "info", "debug, info, warn or error")
	st.String(&l.Format, "log-format", "text", "text or json")
}

func (l *logSettings) logger(w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.Level)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, l.Level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch l.Format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%w: --log-format %q: want text or json", errUsage, l.Format)
}

const devSecretFile = "dev-hmac-secret"

// minHMACSecret is the shortest --jwt-hmac-secret accepted: RFC 7518
// §3.2 asks for an HS256 key at least as long as the hash output.
const minHMACSecret = 32

// checkHMACSecret refuses a --jwt-hmac-secret given empty on the command
// line or in the environment (where an unset shell variable expands to
// nothing), never standing in another key for it, and one shorter than
// minHMACSecret, saying why and how to make one. In a config file an empty
// value is the default, as herald genconfig writes it: no secret given.
func checkHMACSecret(secret string, from origin) error {
	where := from.named("--jwt-hmac-secret")
	switch {
	case secret == "" && from.desc != "" && !from.file:
		return fmt.Errorf("config: %s is empty: an empty secret is an error, never a cue to use another one. Give the nodes' secret "+
			"(at least %d bytes; make one with: head -c 32 /dev/urandom | base64), or leave --jwt-hmac-secret unset to use the development secret in --data-dir",
			where, minHMACSecret)
	case secret != "" && len(secret) < minHMACSecret:
		return fmt.Errorf("config: %s is %d bytes: an HS256 key must be at least %d bytes, as long as the hash (RFC 7518 §3.2), "+
			"or a token signed with it lets anyone guess it offline; make one with: head -c 32 /dev/urandom | base64",
			where, len(secret), minHMACSecret)
	}
	return nil
}

// devSecretPrivate refuses a development secret file that users other
// than its owner can read or write: any of them could mint tokens the node
// accepts (or replace the secret). Herald creates it with mode 0600.
func devSecretPrivate(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("read development secret: %w", err)
	}
	if mode := fi.Mode().Perm(); mode&0o077 != 0 && runtime.GOOS != "windows" {
		return fmt.Errorf("development secret %s can be read or written by other users (mode %s), who could mint tokens with it: "+
			"chmod 600 %s, or delete it to make a new one", path, mode, shellQuote(path))
	}
	return nil
}

// devSecret returns the development HMAC secret kept in dataDir, creating
// it when create is set. created reports whether this call made it. An
// existing secret that other users can read is refused (devSecretPrivate).
func devSecret(dataDir string, create bool) (secret string, created bool, err error) {
	path := filepath.Join(dataDir, devSecretFile)
	b, err := os.ReadFile(path)
	if err == nil {
		if err := devSecretPrivate(path); err != nil {
			return "", false, err
		}
		s := strings.TrimSpace(string(b))
		if len(s) < minHMACSecret {
			return "", false, fmt.Errorf("development secret %s is %d bytes, under the %d an HS256 key needs; delete it, and herald serve makes a new one", path, len(s), minHMACSecret)
		}
		return s, false, nil
	}
	if !os.IsNotExist(err) {
		return "", false, fmt.Errorf("read development secret: %w", err)
	}
	if !create {
		return "", false, fmt.Errorf("no --jwt-hmac-secret given and no development secret at %s (start `herald serve` once, or pass --jwt-hmac-secret)", path)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", false, fmt.Errorf("generate development secret: %w", err)
	}
	s := hex.EncodeToString(raw[:])
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", false, fmt.Errorf("create data directory: %w", err)
	}
	// Write a temporary file and link it into place, which fails if the
	// file exists: of several processes starting on one data directory,
	// one creates the secret and the others read that one, never a
	// half-written file.
	tmp, err := os.CreateTemp(dataDir, devSecretFile+".*")
	if err != nil {
		return "", false, fmt.Errorf("write development secret: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(s + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o600)
	}
	if err != nil {
		return "", false, fmt.Errorf("write development secret: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if os.IsExist(err) {
			return devSecret(dataDir, false)
		}
		return "", false, fmt.Errorf("write development secret: %w", err)
	}
	return s, true, nil
}
