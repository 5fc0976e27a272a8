package crashtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// heraldBin is the herald binary TestMain builds once for every test.
var heraldBin string

// buildingM builds the binary before the tests run and removes it after,
// inside goleak.VerifyTestMain so the leak check still runs last.
type buildingM struct{ m *testing.M }

func (b buildingM) Run() int {
	dir, err := os.MkdirTemp("", "herald-crashtest-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "crashtest: temp dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err := buildHerald(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "crashtest: %v\n", err)
		return 1
	}
	heraldBin = bin
	return b.m.Run()
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(buildingM{m})
}

// buildHerald runs `go build -o <dir>/herald ./cmd/herald` at the module
// root (found with `go env GOMOD`).
func buildHerald(dir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(gomod))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not inside a module")
	}
	bin := filepath.Join(dir, "herald")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/herald")
	cmd.Dir = filepath.Dir(mod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/herald: %w\n%s", err, out)
	}
	return bin, nil
}
