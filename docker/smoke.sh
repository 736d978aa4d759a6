#!/usr/bin/env bash
# docker/smoke.sh - the compose stack on a real container engine, as a user runs it. Prints PASS/FAIL per step and
# exits non-zero on any FAIL; always removes what it started (`docker compose down -v`).
#
# Steps: build both images (time, size); `docker compose up -d`: /health 200 and /ready 503 on the fresh volume;
# the `jobs` profile's indexer on STRATA_SMOKE_ROWS rows; the API swaps to that version and answers /search; the
# `nightly` profile once (STRATA_REBUILD_EVERY_S=0); the nightly loop stopped mid-build with `docker compose stop`:
# prompt (< STRATA_SMOKE_STOP_MAX_S), no exit 137, nothing half-made left in the volume.
#
# Needs: a running engine (`docker info` works; here: eval "$(../shared/tools/container-engine up)"), Docker
# Compose v2, python3 on the host. Run from anywhere: docker/smoke.sh
# Settings (environment):
#   STRATA_SMOKE_DATA      Quora TSV[.gz] on the host, mounted read-only into the jobs containers (default: the one
#                          under $STRATA_DATA_DIR or ../shared/data; if none, the jobs download the official URL)
#   STRATA_SMOKE_ROWS      rows per build (default 3000; IVF nlist scales down to the corpus by itself)
#   STRATA_SMOKE_PROJECT   compose project name (default strata-smoke-<pid>-<random>: never your `strata` stack or
#                          volume, nor another smoke run's on the same engine; runs do share the image tags)
#   STRATA_API_PORT        host port of the API (default: a free one)
#   STRATA_SMOKE_STOP_MAX_S  most seconds `docker compose stop` may take (default 5; compose's own limit is 10)
#   STRATA_SMOKE_LOGS      folder for the build/run logs (default: a new temporary folder, kept and printed)
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 2
ROWS=${STRATA_SMOKE_ROWS:-3000}
STOP_MAX_S=${STRATA_SMOKE_STOP_MAX_S:-5}
PROJECT=${STRATA_SMOKE_PROJECT:-strata-smoke-$$-$RANDOM}  # pids repeat across PID namespaces
LOGS=${STRATA_SMOKE_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/strata-smoke.XXXXXX")}
mkdir -p "$LOGS"
OVERRIDE=$LOGS/compose.smoke.yml
ROOT=/data/indexes/quora
T_START=$SECONDS
PASSED=0 FAILED=0
declare -A INFO=()

say() { printf '%s\n' "$*"; }
pass() { PASSED=$((PASSED + 1)); say "PASS  $1 ($2 s)${3:+: $3}"; }
fail() { FAILED=$((FAILED + 1)); say "FAIL  $1 ($2 s): $3"; }
# step NAME FUNCTION: runs FUNCTION; it sets DETAIL (shown after PASS) or WHY (shown after FAIL) and returns 0/1
step() {
  local name=$1 t0=$SECONDS
  DETAIL="" WHY=""
  if "$2"; then pass "$name" $((SECONDS - t0)) "$DETAIL"; return 0; fi
  fail "$name" $((SECONDS - t0)) "${WHY:-failed}"
  return 1
}
compose() {
  docker compose -p "$PROJECT" -f docker-compose.yml -f "$OVERRIDE" --profile jobs --profile nightly "$@"
}
# http METHOD URL [JSON]: prints the status code, a tab, then the body (no proxies; 000 when nothing answers)
http() {
  python3 - "$@" <<'EOF'
import sys, urllib.error, urllib.request
method, url = sys.argv[1:3]
data = sys.argv[3].encode() if len(sys.argv) > 3 else None
req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
try:
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=30) as r:
        print(f"{r.status}\t{r.read().decode()}")
except urllib.error.HTTPError as e:
    print(f"{e.code}\t{e.read().decode()}")
except OSError as e:
    print(f"000\t{e}")
EOF
}
json_get() {  # json_get KEY [KEY...] < JSON: prints the value at that path ("" if absent)
  python3 -c 'import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1:]:
    v = v[int(k)] if isinstance(v, list) else (v or {}).get(k)
print("" if v is None else v)' "$@" 2>/dev/null
}
tail_log() { say "      --- last lines of $1"; tail -n "${2:-15}" "$1" | sed 's/^/      | /'; }
volume_ls() {  # the index root's entries as the jobs image sees them (dot files too)
  compose run --rm --no-deps -T indexer sh -c "ls -A $ROOT 2>/dev/null" 2>>"$LOGS/ls.log"
}
cleanup() {
  local rc=$? t0=$SECONDS
  trap - EXIT INT TERM
  if [ -n "${ENGINE_OK:-}" ]; then
    if compose down -v --remove-orphans --timeout 20 >"$LOGS/down.log" 2>&1; then
      pass "cleanup: compose down -v" $((SECONDS - t0))
    else
      fail "cleanup: compose down -v" $((SECONDS - t0)) "see $LOGS/down.log"; rc=1
    fi
  fi
  say "smoke: $PASSED passed, $FAILED failed in $((SECONDS - T_START)) s (logs: $LOGS)"
  [ "$FAILED" = 0 ] || rc=1
  exit "$rc"
}
trap cleanup EXIT
trap 'say "interrupted"; FAILED=$((FAILED + 1)); exit 130' INT TERM

engine() {
  docker info >"$LOGS/info.log" 2>&1 || { WHY="docker info fails: $(tail -n 1 "$LOGS/info.log")"; return 1; }
  local v
  v=$(docker compose version --short 2>/dev/null) || { WHY="no Docker Compose v2 (docker compose version)"; return 1; }
  [[ $v == 2.* || $v == v2.* ]] || { WHY="Docker Compose $v; v2 is needed"; return 1; }
  ENGINE_OK=1
  DETAIL="engine $(docker info --format '{{.ServerVersion}}'), Compose $v"
}

setup() {
  local data=${STRATA_SMOKE_DATA:-} d name
  if [ -z "$data" ]; then
    for d in "${STRATA_DATA_DIR:-}" "$REPO/../shared/data"; do
      for name in quora_duplicate_questions.tsv quora_duplicate_questions.tsv.gz \
                  quora_duplicate_questions.partial.tsv.gz; do
        [ -n "$d" ] && [ -f "$d/$name" ] && { data=$d/$name; break 2; }
      done
    done
  fi
  {
    echo "# written by docker/smoke.sh"
    echo "services:"
    for svc in indexer nightly; do
      echo "  $svc:"
      echo "    environment:"
      echo "      STRATA_BUILD_ARGS: \"--rows \${SMOKE_ROWS:-$ROWS} --keep 5\""
      # the nightly's training chain (STRATA_ADAPT=1) takes ~45 min: tests/test_containers.py runs that entrypoint
      # path on the host with a tiny BERT; here the nightly rebuilds with the stock encoder
      echo "      STRATA_ADAPT: \"0\""
      if [ -n "$data" ]; then
        [ -f "$data" ] || { WHY="STRATA_SMOKE_DATA=$data is not a file"; return 1; }
        data=$(cd "$(dirname "$data")" && pwd)/$(basename "$data")
        echo "      STRATA_QUORA: /smoke-data/$(basename "$data")"
        echo "    volumes:"
        echo "      - \"$(dirname "$data"):/smoke-data:ro\""
      fi
    done
  } >"$OVERRIDE"
  if [ -z "${STRATA_API_PORT:-}" ]; then
    STRATA_API_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  fi
  export STRATA_API_PORT
  API=http://127.0.0.1:$STRATA_API_PORT
  compose down -v --remove-orphans --timeout 20 >"$LOGS/down-before.log" 2>&1  # what a killed run of it left
  DETAIL="project $PROJECT, API on :$STRATA_API_PORT, data ${data:-the official URL}, $ROWS rows"
}

build_image() {  # build_image SERVICE TAG
  local t0=$SECONDS log=$LOGS/build-$1.log size
  compose build "$1" >"$log" 2>&1 || { tail_log "$log" 25; WHY="docker compose build $1 failed (log: $log)"; return 1; }
  size=$(docker image inspect -f '{{.Size}}' "$2") || { WHY="no image $2 after the build"; return 1; }
  INFO[$1]="$2 $((size / 1000000)) MB, built in $((SECONDS - t0)) s"
  DETAIL=${INFO[$1]}
}
build_api() { build_image api strata-api:latest; }
build_jobs() { build_image indexer strata-jobs:latest; }

up() {
  compose up -d api >"$LOGS/up.log" 2>&1 || { tail_log "$LOGS/up.log"; WHY="docker compose up -d failed"; return 1; }
  local i r
  for ((i = 0; i < 120; i++)); do
    r=$(http GET "$API/health")
    [ "${r%%$'\t'*}" = 200 ] && { DETAIL="GET /health 200 after ${i}x0.5 s"; return 0; }
    sleep 0.5
  done
  compose logs api >"$LOGS/api.log" 2>&1; tail_log "$LOGS/api.log"
  WHY="GET /health: ${r:-nothing} after 60 s"; return 1
}

ready_503() {
  local r
  r=$(http GET "$API/ready")
  [ "${r%%$'\t'*}" = 503 ] || { WHY="GET /ready on a fresh volume answered ${r:0:200}, expected 503"; return 1; }
  DETAIL="GET /ready 503: $(json_get reason <<<"${r#*$'\t'}")"
}

# job LOG COMPOSE-RUN-ARGS...: one build in a jobs container; sets BUILT to the version it printed
job() {
  local log=$1 rc=0; shift
  compose run --rm -T "$@" >"$log" 2>&1 || rc=$?
  [ "$rc" = 0 ] || { tail_log "$log"; WHY="docker compose run $* exited $rc (log: $log)"; return 1; }
  BUILT=$(sed -n 's/^built version \([^ ]*\) .*/\1/p' "$log" | tail -n 1)
  [ -n "$BUILT" ] || { tail_log "$log"; WHY="no 'built version' line (log: $log)"; return 1; }
  DETAIL=$(grep -E '^(built version|MRR@10)' "$log" | tr '\n' ' ')
}
jobs_build() { job "$LOGS/jobs.log" indexer && FIRST=$BUILT; }
nightly_once() {
  job "$LOGS/nightly-once.log" -e STRATA_REBUILD_EVERY_S=0 nightly || return 1
  SECOND=$BUILT
  [ "$SECOND" != "$FIRST" ] || { WHY="built $SECOND again"; return 1; }
  grep -q 'wrote \|exporting' "$LOGS/nightly-once.log" && { WHY="exported the encoder again"; return 1; }
  return 0
}

# swapped_to VERSION: the API serves VERSION within 60 s (its watcher polls every 5 s)
swapped_to() {
  local i r v=""
  for ((i = 0; i < 120; i++)); do
    r=$(http GET "$API/ready")
    v=$(json_get index_version <<<"${r#*$'\t'}")
    [ "${r%%$'\t'*}" = 200 ] && [ "$v" = "$1" ] && { DETAIL="GET /ready 200, index_version $v after ${i}x0.5 s"; return 0; }
    sleep 0.5
  done
  WHY="the API still serves ${v:-nothing} after 60 s, not $1: ${r:0:300}"; return 1
}
swap_first() { swapped_to "$FIRST"; }
swap_second() { swapped_to "$SECOND"; }

search() {
  local r body n v top
  r=$(http POST "$API/search" '{"query": "How do I learn to play the guitar?", "top_k": 3}')
  body=${r#*$'\t'}
  [ "${r%%$'\t'*}" = 200 ] || { WHY="POST /search answered ${r:0:300}"; return 1; }
  n=$(python3 -c 'import json, sys; print(len(json.load(sys.stdin)["hits"]))' <<<"$body")
  v=$(json_get index_version <<<"$body")
  top=$(json_get hits 0 text <<<"$body")
  { [ "$n" = 3 ] && [ "$v" = "$FIRST" ]; } || { WHY="expected 3 hits from $FIRST: ${body:0:300}"; return 1; }
  DETAIL="3 hits from $v, top: \"$top\""
}

stop_mid_build() {
  # the loop, as `docker compose --profile nightly up -d` starts it, on 10x the rows so it is surely mid-build
  SMOKE_ROWS=$((ROWS * 10)) compose up -d nightly >"$LOGS/nightly-up.log" 2>&1 \
    || { tail_log "$LOGS/nightly-up.log"; WHY="docker compose up -d nightly failed"; return 1; }
  local i staged="" t0 took codes c
  for ((i = 0; i < 300; i++)); do
    staged=$(compose exec -T nightly sh -c "cd $ROOT && ls -d .building-* 2>/dev/null" 2>/dev/null) && break
    sleep 0.5
  done
  [ -n "$staged" ] || { compose logs nightly >"$LOGS/nightly.log" 2>&1; tail_log "$LOGS/nightly.log"
                        WHY="no .building-* folder within 150 s"; return 1; }
  t0=$(date +%s.%N)
  compose stop >"$LOGS/stop.log" 2>&1 || { tail_log "$LOGS/stop.log"; WHY="docker compose stop failed"; return 1; }
  took=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
  compose logs nightly >"$LOGS/nightly.log" 2>&1
  codes=""
  for c in $(compose ps -a -q api nightly); do
    codes+="$(docker inspect -f '{{index .Config.Labels "com.docker.compose.service"}}={{.State.ExitCode}}' "$c") "
  done
  INFO[stop]="docker compose stop: $took s mid-build, exit codes ${codes% }"
  DETAIL="stopped in $took s while building $staged; exit codes ${codes% }"
  [[ " $codes" != *=137* ]] || { tail_log "$LOGS/nightly.log"; WHY="killed (137): $DETAIL"; return 1; }
  python3 -c "import sys; sys.exit(float(sys.argv[1]) >= float(sys.argv[2]))" "$took" "$STOP_MAX_S" \
    || { WHY="too slow (limit $STOP_MAX_S s): $DETAIL"; return 1; }
  grep -q 'indexer build: terminated (SIGTERM)' "$LOGS/nightly.log" \
    || { tail_log "$LOGS/nightly.log"; WHY="the build did not report SIGTERM: $DETAIL"; return 1; }
}

nothing_half_made() {
  local entries lock
  entries=$(volume_ls | tr '\n' ' ')
  [[ $entries == *versions* && $entries != *.building-* ]] || { WHY="index root holds: $entries"; return 1; }
  lock=$(compose run --rm --no-deps -T indexer python -c "import fcntl; fcntl.flock(open('$ROOT/.build.lock', 'a+'),
fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')" 2>&1 | tail -n 1)
  [ "$lock" = free ] || { WHY="build lock: $lock"; return 1; }
  compose run --rm --no-deps -T indexer indexer info --root "$ROOT" >"$LOGS/info-after.log" 2>&1
  { grep -q "^\* $SECOND " "$LOGS/info-after.log" && [ "$(grep -c '^[* ] ' "$LOGS/info-after.log")" = 2 ]; } \
    || { tail_log "$LOGS/info-after.log"; WHY="expected versions $FIRST and $SECOND (current)"; return 1; }
  DETAIL="index root: $entries; lock free; current still $SECOND"
}

STEPS=(  # "name|function"
  "engine reachable|engine"
  "setup|setup"
  "build api image|build_api"
  "build jobs image|build_jobs"
  "compose up -d, GET /health|up"
  "GET /ready 503 before the first build|ready_503"
  "jobs profile: indexer --rows $ROWS|jobs_build"
  "API swaps to the new version|swap_first"
  "POST /search|search"
  "nightly profile once|nightly_once"
  "API swaps to the nightly version|swap_second"
  "compose stop mid-build|stop_mid_build"
  "nothing half-made, lock free|nothing_half_made"
)
for s in "${STEPS[@]}"; do
  step "${s%|*}" "${s##*|}" || { say "(later steps skipped)"; break; }
done
for k in api indexer stop; do [ -z "${INFO[$k]:-}" ] || say "      ${INFO[$k]}"; done
