//go:build !linux

package fanout

import "os"

// HistoryLogSupported is false: the history log needs shared file
// mappings and a boot id (Linux).
const HistoryLogSupported = false

func mapFile(*os.File, int) ([]byte, error) { return nil, errNoHistoryLog }

func unmapFile([]byte) error { return errNoHistoryLog }

func bootID() string { return "" }
