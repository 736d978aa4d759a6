#!/bin/sh
# Default job (the nightly rebuild): export the default encoder when no model exists, then build a new index
# version beside the served one and flip `current`; a running API swaps to it without downtime. When the API has
# taken writes (PUT /documents), `indexer compact` then folds its write log into one more version.
# STRATA_COLLECTION (default quora) names the collection built, /data/indexes/$STRATA_COLLECTION; STRATA_DATA its
# corpus (default STRATA_QUORA). Any arguments replace the default job (e.g. `indexer eval --json`, `indexer rollback`).
# STRATA_REBUILD_EVERY_S=N (N > 0): run the job, sleep N seconds, again, until stopped (the `nightly` service);
# unset or 0: run it once and exit with its status.
# SIGTERM/SIGINT (`docker compose stop`): forwarded to the running job, which cleans up (a build removes its
# staging folder and releases its lock; an export its temporary folder), then this script exits 143 at once.
set -eu
if [ "$#" -gt 0 ]; then exec "$@"; fi
# The default encoder: all-MiniLM-L6-v2 with BERT-LC's layer combination (indexer/runtime/paths.py says why).
# STRATA_CHECKPOINT (a Hugging Face checkpoint folder to export instead) gets mean pooling: layers 0,6 were chosen
# for all-MiniLM-L6-v2 only. STRATA_POOLING overrides either; the model folder is named after what it holds.
if [ -n "${STRATA_CHECKPOINT:-}" ]; then
  POOLING="${STRATA_POOLING:-mean}"
  NAME="$(basename "$STRATA_CHECKPOINT")"
else
  POOLING="${STRATA_POOLING:-layers:0,6}"
  NAME="all-MiniLM-L6-v2"
fi
MODEL="${STRATA_MODEL_DIR:-$STRATA_HOME/models/$NAME-$(printf '%s' "$POOLING" | tr ':,' '--')}"
EVERY="${STRATA_REBUILD_EVERY_S:-0}"
case "$EVERY" in
  "" | *[!0-9]*) echo "jobs-entrypoint: STRATA_REBUILD_EVERY_S must be a whole number of seconds, got '$EVERY'" >&2
                 exit 2 ;;
esac
# STRATA_ADAPT=1: the nightly chain trains (or reuses) an encoder adapted to Quora with its duplicate labels
# (`encoder adapt --recipe quora`: its finished stages and checkpoints are kept in ADAPTED.work, so a night only
# redoes what changed) and builds with it, choosing nprobe for it (--target-recall); the API swaps only if its
# gates pass (MRR@10 included). Only the Quora TSV (or a URL, taken as Quora's) has those labels: a collection
# with another corpus is built with the stock encoder, and a notice says so — nothing adapts to it unasked.
# STRATA_ADAPT=corpus: label-free adaptation to the corpus itself (`encoder adapt --data CORPUS`, recipe crops
# unless STRATA_ADAPT_ARGS says otherwise, e.g. "--recipe simcse --queries /data/dev"); not recommended at present
# (docs/adapt.md). STRATA_ADAPT_ARGS is passed to `encoder adapt` (e.g. "--steps 500 --threads 2").
ADAPT="${STRATA_ADAPT:-0}"
case "$ADAPT" in
  0 | 1 | corpus) ;;
  *) echo "jobs-entrypoint: STRATA_ADAPT must be 0, 1 or corpus, got '$ADAPT'" >&2; exit 2 ;;
esac
ADAPTED="${STRATA_ADAPTED_MODEL_DIR:-$STRATA_HOME/models/$NAME-adapted-mean}"
ADAPTED_CORPUS="${STRATA_ADAPTED_MODEL_DIR:-$STRATA_HOME/models/$NAME-adapted-to-${STRATA_COLLECTION:-quora}}"

# is_quora_tsv DATA: whether DATA is the Quora question-pairs TSV that the supervised recipe reads (a URL is taken
# as Quora's, as `encoder adapt` takes it); the same format detection as `indexer build --data`
is_quora_tsv() {
  case "$1" in *://*) return 0 ;; esac
  python -c 'import sys; from pathlib import Path; from indexer.corpus import detect_format
try:
    sys.exit(0 if detect_format(Path(sys.argv[1])) == "quora" else 1)
except Exception:
    sys.exit(1)' "$1"
}

child=""
stop() {
  trap '' TERM INT
  if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null || :; wait "$child" || :; fi
  echo "jobs-entrypoint: stopped" >&2
  exit 143
}
trap stop TERM INT
# run CMD...: in the background and waited for, so that a signal runs `stop` at once (a shell runs traps only
# between commands) and reaches CMD
run() {
  "$@" &
  child=$!
  rc=0
  wait "$child" || rc=$?
  child=""
  return "$rc"
}

job() {
  data="${STRATA_DATA:-${STRATA_QUORA:-http://qim.fs.quoracdn.net/quora_duplicate_questions.tsv}}"
  model="$MODEL"
  probe=""
  adapt="$ADAPT"
  if [ "$adapt" = 1 ] && ! is_quora_tsv "$data"; then
    echo "jobs-entrypoint: STRATA_ADAPT=1 adapts to the Quora TSV's duplicate labels only; $data is another corpus," \
         "so it is built with the stock encoder (label-free adaptation to it: STRATA_ADAPT=corpus, not" \
         "recommended at present, see docs/adapt.md)" >&2
    adapt=0
  fi
  if [ "$adapt" = 1 ]; then
    # shellcheck disable=SC2086
    run encoder adapt --recipe quora --out "$ADAPTED" --data "$data" --no-progress \
      --quantize "${STRATA_QUANTIZE:-auto}" ${STRATA_CHECKPOINT:+--checkpoint "$STRATA_CHECKPOINT"} \
      ${STRATA_ADAPT_ARGS:-} || return
    model="$ADAPTED"
    probe="--target-recall ${STRATA_TARGET_RECALL:-0.95}"
  elif [ "$adapt" = corpus ]; then
    # shellcheck disable=SC2086
    run encoder adapt --recipe crops --out "$ADAPTED_CORPUS" --data "$data" --no-progress \
      --quantize "${STRATA_QUANTIZE:-auto}" ${STRATA_CHECKPOINT:+--checkpoint "$STRATA_CHECKPOINT"} \
      ${STRATA_ADAPT_ARGS:-} || return
    model="$ADAPTED_CORPUS"
    probe="--target-recall ${STRATA_TARGET_RECALL:-0.95}"
  elif [ ! -f "$MODEL/encoder.json" ]; then
    # STRATA_QUANTIZE: auto (default: static int8 when STRATA_DATA_DIR holds the STS-B dev, Quora and calibration
    # files its quality gate reads — mount the shared data folder — else fp32 with a notice), int8 or none.
    run encoder export --out "$MODEL" --pooling "$POOLING" --quantize "${STRATA_QUANTIZE:-auto}" \
      ${STRATA_CHECKPOINT:+--checkpoint "$STRATA_CHECKPOINT"} || return
  fi
  # STRATA_BUILD_ARGS is split on spaces on purpose: extra flags such as "--keep 7 --threads 4"
  # shellcheck disable=SC2086
  # one collection of the API's STRATA_COLLECTIONS_DIR (/data/indexes): STRATA_COLLECTION names it
  root="${STRATA_INDEX_ROOT:-$STRATA_HOME/indexes/${STRATA_COLLECTION:-quora}}"
  run indexer build --model "$model" --root "$root" --data "$data" $probe ${STRATA_BUILD_ARGS:-} || return
  # the version built from the source data holds none of the API's writes (the API replays them onto it): fold
  # the write log into a version of its own; without a log this does nothing
  if [ -f "$root/writes/log.sqlite" ]; then run indexer compact --root "$root"; fi
}

if [ "$EVERY" -eq 0 ]; then
  rc=0
  job || rc=$?
  exit "$rc"
fi
while :; do
  job || echo "jobs-entrypoint: build failed (exit $?); the API keeps serving its index; next try in ${EVERY} s" >&2
  run sleep "$EVERY"
done
