// Package scratchdb creates a PostgreSQL database for one load-test run
// and drops it afterwards, so runs never share a table or a backlog.
package scratchdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
)

// DB is a database created by Create.
type DB struct {
	Name  string // prefix + 12 random hex digits
	URL   string // the admin URL with its path replaced by Name
	admin string
}

var prefixOK = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Create creates <prefix><random> on the server adminURL names, connecting
// through adminURL's own database. prefix must be lower-case letters,
// digits and underscores (the name is used unquoted).
func Create(ctx context.Context, adminURL, prefix string) (*DB, error) {
	if !prefixOK.MatchString(prefix) {
		return nil, fmt.Errorf("scratchdb: prefix %q: want [a-z_][a-z0-9_]*", prefix)
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return nil, fmt.Errorf("scratchdb: database URL: %w", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	db := &DB{admin: adminURL, Name: prefix + hex.EncodeToString(b[:])}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("scratchdb: connect to %s: %w", u.Redacted(), err)
	}
	defer conn.Close(context.WithoutCancel(cctx))
	if _, err := conn.Exec(cctx, "CREATE DATABASE "+db.Name); err != nil {
		return nil, fmt.Errorf("scratchdb: create database %s: %w", db.Name, err)
	}
	u.Path = "/" + db.Name
	db.URL = u.String()
	return db, nil
}

// Drop removes the database, ending any session still on it (a child
// killed before it closed its pool, say).
func (db *DB) Drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.admin)
	if err != nil {
		return fmt.Errorf("scratchdb: drop database %s: %w", db.Name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db.Name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("scratchdb: drop database %s: %w", db.Name, err)
	}
	return nil
}
