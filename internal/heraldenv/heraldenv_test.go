package heraldenv

import (
	"slices"
	"strings"
	"testing"
)

func TestCleanDropsHeraldVariables(t *testing.T) {
	t.Setenv("HERALD_LISTEN", "127.0.0.1:1")
	t.Setenv("HERALDX_KEPT", "1")
	env := Clean()
	for _, kv := range env {
		if strings.HasPrefix(kv, "HERALD_") {
			t.Errorf("Clean kept %s", kv)
		}
	}
	if !slices.Contains(env, "HERALDX_KEPT=1") {
		t.Error("Clean dropped HERALDX_KEPT, which is not a HERALD_ variable")
	}
}
