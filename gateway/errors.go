package gateway

import (
	"errors"

	"github.com/heraldgw/herald/gateway/internal/sse"
	"github.com/heraldgw/herald/gateway/internal/ws"
	"github.com/heraldgw/herald/internal/lifecycle"
)

var (
	// ErrBadFrame is wrapped by every WebSocket client-frame decode error.
	ErrBadFrame = ws.ErrBadFrame
	// ErrBadCursor is wrapped by every resume-cursor parse error.
	ErrBadCursor = sse.ErrBadCursor
	// ErrInvalidConfig is wrapped by every Config or Deps validation error.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrStarted is returned by Start on a server that was already started.
	ErrStarted = lifecycle.ErrStarted
	// ErrStopped is returned by Start on a server that was stopped.
	ErrStopped = lifecycle.ErrStopped
)
