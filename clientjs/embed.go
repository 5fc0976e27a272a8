// Package clientjs embeds Herald's browser/Node client so the gateway can
// serve it at /client/herald.js.
package clientjs

import "embed"

// FS holds herald.js.
//
//go:embed herald.js
var FS embed.FS
