package sqlitestore

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/heraldgw/herald/internal/testenv"
	"github.com/heraldgw/herald/outboxfeed/storetest"
)

func TestSQLiteFixtureUpgradesInPlace(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "herald.db")
	src, err := os.Open("testdata/sqlite-v4.db")
	testenv.Must(t, err, "open fixture")
	dst, err := os.Create(path)
	testenv.Must(t, err, "create copy")
	_, err = io.Copy(dst, src)
	testenv.Must(t, err, "copy fixture")
	testenv.Must(t, errors.Join(src.Close(), dst.Close()), "close copies")
	s, err := Open(context.Background(), Config{Path: path})
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = s.Close() })
	storetest.CheckFixture(t, s, "testdata/sqlite-v4-ids.json", func() {
		_, err := s.DB().Exec(`UPDATE outbox_retry SET next_attempt_at = 0 WHERE state = 'pending'`)
		testenv.Must(t, err, "make the retry due")
	})
}
