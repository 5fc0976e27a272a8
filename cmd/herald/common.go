package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// defaultDataDir is the default --data-dir.
const defaultDataDir = "./herald-data"

// storeSettings select the outbox store.
type storeSettings struct {
	DatabaseURL string
	DataDir     string
}

func (s *storeSettings) register(st *settings) {
	st.String(&s.DataDir, "data-dir", defaultDataDir, "directory for the embedded store and the development secret")
	st.String(&s.DatabaseURL, "database-url", "", "outbox store: postgres://… selects PostgreSQL; empty = embedded SQLite file <data-dir>/herald.db")
}

// url is the effective store URL.
func (s *storeSettings) url() string {
	if s.DatabaseURL != "" {
		return s.DatabaseURL
	}
	return filepath.Join(s.DataDir, "herald.db")
}

func (s *storeSettings) isPostgres() bool {
	u := s.url()
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
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
		if s == "" {
			return "", false, fmt.Errorf("development secret %s is empty; delete it to make a new one", path)
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
