# Sourced by the test scripts: retry runs its arguments up to three times,
# 5 s apart, so a mirror or the npm registry failing once does not fail the
# whole test run. Callers define log().
retry() {
  local n
  for n in 1 2 3; do
    "$@" && return 0
    [ "$n" = 3 ] || { log "attempt $n of '$*' failed; retrying in 5 s"; sleep 5; }
  done
  return 1
}
