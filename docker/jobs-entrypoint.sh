#!/bin/sh
# Default job (the nightly rebuild): export the default encoder when no model exists, then build a new index
# version beside the served one and flip `current`; a running API swaps to it without downtime.
# Any arguments replace the default job (e.g. `indexer eval --json`, `indexer rollback`).
set -eu
if [ "$#" -gt 0 ]; then exec "$@"; fi
MODEL="${STRATA_MODEL_DIR:-$STRATA_HOME/models/all-MiniLM-L6-v2-mean}"
if [ ! -f "$MODEL/encoder.json" ]; then
  # STRATA_CHECKPOINT: a Hugging Face checkpoint folder to export instead of the default all-MiniLM-L6-v2.
  # STRATA_QUANTIZE: int8 (default: static int8, refused unless batch-invariant and within the quality gate,
  # which reads STS-B dev, Quora and the calibration sentences under STRATA_DATA_DIR) or none (fp32).
  encoder export --out "$MODEL" --pooling "${STRATA_POOLING:-mean}" --quantize "${STRATA_QUANTIZE:-int8}" \
    ${STRATA_CHECKPOINT:+--checkpoint "$STRATA_CHECKPOINT"}
fi
# STRATA_BUILD_ARGS is split on spaces on purpose: extra flags such as "--keep 7 --threads 4"
# shellcheck disable=SC2086
exec indexer build --model "$MODEL" --root "${STRATA_INDEX_ROOT:-$STRATA_HOME/indexes/quora}" \
  --data "${STRATA_QUORA:-http://qim.fs.quoracdn.net/quora_duplicate_questions.tsv}" ${STRATA_BUILD_ARGS:-}
