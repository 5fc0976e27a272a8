// Package deploy holds Herald's deployment recipes: the container image
// (container/Containerfile) and the systemd unit (systemd/herald.service).
// It has no code; its tests build the binary as the image recipe does and
// run it with the settings the recipes give it, so the recipes cannot drift
// from the binary.
package deploy
