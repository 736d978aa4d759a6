#!/bin/sh
# Default job: export the default encoder when no model exists, then build a new index version.
# Any arguments replace the default job (e.g. `indexer eval --json`).
set -eu
if [ "$#" -gt 0 ]; then exec "$@"; fi
MODEL="${STRATA_MODEL_DIR:-$STRATA_HOME/models/all-MiniLM-L6-v2-mean}"
if [ ! -f "$MODEL/encoder.json" ]; then
  encoder export --out "$MODEL" --pooling mean
fi
exec indexer build --model "$MODEL" --root "${STRATA_INDEX_ROOT:-$STRATA_HOME/indexes/quora}" \
  --data "${STRATA_QUORA:-http://qim.fs.quoracdn.net/quora_duplicate_questions.tsv}" ${STRATA_BUILD_ARGS:-}
