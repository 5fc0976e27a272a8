// Package clientjs embeds Herald's browser/Node client so the gateway can
// serve it under /client/: the modules of this directory, minified on
// their own (no bundling) into dist/ by build.mjs.
package clientjs

import (
	"embed"
	"io/fs"
)

//go:embed dist/*.js
var dist embed.FS

// FS holds the client's modules: herald.js (both transports), sse.js
// (SSE only), ws.js (WebSocket only) and the modules they import.
var FS = func() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err)
	}
	return sub
}()
