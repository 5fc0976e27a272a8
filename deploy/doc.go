// Package deploy holds Herald's deployment recipes: the container image
// (container/Containerfile), the systemd unit (systemd/herald.service) and
// the reverse proxy configurations for nginx (nginx/herald.conf) and
// HAProxy (haproxy/herald.cfg). It has no code; its tests build the binary
// as the image recipe does and run it with the settings the recipes give
// it, and run nginx and HAProxy with their files in front of two nodes, so
// the recipes cannot drift from the binary. docs/deploy.md explains them.
package deploy
