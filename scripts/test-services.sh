#!/usr/bin/env bash
# Makes sure the services the tests talk to answer: PostgreSQL and Redis.
# Uses HERALD_TEST_DATABASE_URL / HERALD_TEST_REDIS_URL when set; else the
# local services on 127.0.0.1; else starts them; else installs them with apt
# (as root) and starts them on loopback. Never lets tests run without them.
# Also installs promtool (Debian's prometheus package), which
# internal/alertstest needs to check docs/alerts, and Debian's nginx and
# haproxy, whose binaries deploy/proxy_test.go runs in front of Herald.
set -euo pipefail

log() { echo "test-services: $*" >&2; }

# shellcheck source=scripts/lib-retry.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-retry.sh"

need_root() {
  if [ "$(id -u)" != 0 ]; then
    log "$1 is missing and installing it needs root; start it yourself or set the HERALD_TEST_* URL"
    exit 1
  fi
}

apt_install() {
  need_root "$*"
  log "installing $* with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  retry apt-get update -qq >/dev/null
  retry apt-get install -y -qq "$@" >/dev/null
}

pg_answers() {
  if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -q -h 127.0.0.1 -p 5432
  else
    (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null
  fi
}

redis_answers() {
  if command -v redis-cli >/dev/null 2>&1; then
    [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = PONG ]
  else
    (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null
  fi
}

ensure_postgres() {
  if [ -n "${HERALD_TEST_DATABASE_URL:-}" ]; then
    log "PostgreSQL from HERALD_TEST_DATABASE_URL"
    return
  fi
  pg_answers && { log "PostgreSQL answers on 127.0.0.1:5432"; ensure_test_db; return; }
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    apt_install postgresql
  fi
  need_root "starting PostgreSQL"
  local ver hba
  ver=$(ls /etc/postgresql | sort -V | tail -n 1)
  hba=/etc/postgresql/$ver/main/pg_hba.conf
  if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  for _ in $(seq 1 60); do pg_answers && break; sleep 0.5; done
  pg_answers || { log "PostgreSQL did not start"; exit 1; }
  log "PostgreSQL started"
  ensure_test_db
}

ensure_test_db() {
  command -v psql >/dev/null 2>&1 || return 0
  if ! psql -h 127.0.0.1 -U postgres -d test -Atc 'select 1' >/dev/null 2>&1; then
    psql -h 127.0.0.1 -U postgres -d postgres -c 'CREATE DATABASE test' >/dev/null
  fi
}

ensure_redis() {
  if [ -n "${HERALD_TEST_REDIS_URL:-}" ]; then
    log "Redis from HERALD_TEST_REDIS_URL"
    return
  fi
  redis_answers && { log "Redis answers on 127.0.0.1:6379"; return; }
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 1 40); do redis_answers && break; sleep 0.25; done
  redis_answers || { log "Redis did not start"; exit 1; }
  log "Redis started"
}

# promtool checks and unit-tests the alert rules (internal/alertstest).
# Debian ships it in the prometheus package; only the binary is used, the
# package's server is not started here.
ensure_promtool() {
  command -v promtool >/dev/null 2>&1 && { log "promtool: $(command -v promtool)"; return; }
  if [ "$(id -u)" != 0 ]; then
    log "promtool is missing and installing it needs root: apt-get install prometheus (go test ./internal/alertstest fails without it)"
    exit 1
  fi
  retry apt-get update -qq >/dev/null
  # Read the policy first: grep -q closing the pipe early would fail the
  # pipeline under pipefail.
  local policy
  policy=$(apt-cache policy prometheus 2>/dev/null || true)
  if ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
    log "no prometheus package in the apt sources: put promtool from https://prometheus.io/download/ on PATH"
    exit 1
  fi
  log "installing prometheus (for /usr/bin/promtool) with apt-get"
  DEBIAN_FRONTEND=noninteractive retry apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  command -v promtool >/dev/null 2>&1 || { log "prometheus installed but no promtool on PATH"; exit 1; }
}

# deploy/proxy_test.go runs /usr/sbin/nginx and /usr/sbin/haproxy itself
# with temporary configurations and ports. The packages' own
# services are never started: a policy-rc.d keeps apt from starting them,
# and on a systemd machine they are disabled, so nothing listens on ports
# 80 and 443 afterwards.
ensure_proxies() {
  local missing=()
  [ -x /usr/sbin/nginx ] || missing+=(nginx)
  [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
  if [ ${#missing[@]} -eq 0 ]; then
    log "nginx and haproxy: /usr/sbin/nginx, /usr/sbin/haproxy"
    return
  fi
  if [ "$(id -u)" != 0 ]; then
    log "${missing[*]} missing and installing needs root: apt-get install ${missing[*]} (go test ./deploy fails without them)"
    exit 1
  fi
  log "installing ${missing[*]} with apt-get (services left stopped)"
  retry apt-get update -qq >/dev/null
  (
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
      trap 'rm -f "$policy"' EXIT
      printf '#!/bin/sh\nexit 101\n' > "$policy"
      chmod 0755 "$policy"
    fi
    DEBIAN_FRONTEND=noninteractive retry apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  )
  local svc
  for svc in "${missing[@]}"; do
    if [ -d /run/systemd/system ]; then
      systemctl disable --now "$svc" >/dev/null 2>&1 || true
    else
      service "$svc" stop >/dev/null 2>&1 || true
    fi
  done
  [ -x /usr/sbin/nginx ] && [ -x /usr/sbin/haproxy ] || { log "nginx or haproxy installed but not in /usr/sbin"; exit 1; }
}

ensure_postgres
ensure_redis
ensure_proxies
ensure_promtool
