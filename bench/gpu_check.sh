#!/usr/bin/env bash
# The GPU path's one check on a CUDA machine, about 8 minutes: install the `gpu` extra (faiss-gpu-cu12 and
# onnxruntime-gpu with its CUDA 12 / cuDNN 9 wheels) in place of the CPU wheels, run the GPU tests (they skip,
# naming why, anywhere else), then the 1M encode + build + search benchmark (bench/gpu_bench.py).
#
#   bash bench/gpu_check.sh                   # results under $OUT if set (the device runner's), else bench/results
#   STRATA_WHEELS=/path/to/wheels bash bench/gpu_check.sh   # a machine without PyPI: install from a wheel folder
#   GPU_BENCH_N=300000 bash bench/gpu_check.sh               # a smaller benchmark
#
# It changes the Python environment it runs in (the CPU faiss and onnxruntime wheels are replaced): run it on a
# disposable GPU machine or in a venv, never on a CPU machine's shared environment.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/bench/results}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export STRATA_DATA_DIR="${STRATA_DATA_DIR:-$( [ -d shared/data ] && echo "$PWD/shared/data" || echo /work/shared/data)}"
N="${GPU_BENCH_N:-1000000}"
LOG="$OUT/gpu-check.log"
: >"$LOG"
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }

say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -3)"
if ! nvidia-smi >/dev/null 2>&1; then
  say "no NVIDIA GPU here (nvidia-smi failed): nothing to check"
  exit 3
fi

# 1. the gpu extra's wheels (≤ 4.5 min). Both faiss wheels install the same `faiss` package, and both onnxruntime
#    wheels the same `onnxruntime`: the CPU ones are removed, then the GPU ones reinstalled over what they left.
PIP=(python -m pip install --quiet --disable-pip-version-check)
[ -n "${STRATA_WHEELS:-}" ] && PIP+=(--no-index --find-links "$STRATA_WHEELS")
GPU_PKGS=("faiss-gpu-cu12>=1.8" "onnxruntime-gpu[cuda,cudnn]>=1.21")
say "installing ${GPU_PKGS[*]}"
if ! timeout 200 "${PIP[@]}" "${GPU_PKGS[@]}" >>"$LOG" 2>&1; then
  say "pip could not install the gpu extra (see $LOG; offline? set STRATA_WHEELS to a wheel folder)"
  exit 2
fi
python -m pip uninstall --quiet -y faiss-cpu onnxruntime >>"$LOG" 2>&1
timeout 60 "${PIP[@]}" --force-reinstall --no-deps faiss-gpu-cu12 onnxruntime-gpu >>"$LOG" 2>&1
python - <<'EOF' 2>&1 | tee -a "$LOG"
import faiss, onnxruntime as ort
print("faiss", faiss.__version__, "GPUs:", faiss.get_num_gpus(), "| onnxruntime", ort.__version__,
      ort.get_available_providers())
EOF

# 2. the GPU tests (≤ 80 s; the encoder test exports the default encoder first)
say "GPU tests"
timeout 80 python -m pytest -q -rs -p no:cacheprovider tests/indexer/runtime/test_gpu_path.py 2>&1 | tee -a "$LOG" \
  | tee "$OUT/gpu-check-tests.txt"
TESTS=${PIPESTATUS[0]}

# 3. the benchmark (≤ 140 s at 1M on an H100-class GPU)
say "benchmark: $N documents"
timeout 140 python -m bench.gpu_bench --n "$N" --out "$OUT" 2>&1 | tee -a "$LOG"
BENCH=${PIPESTATUS[0]}
say "tests exit $TESTS, benchmark exit $BENCH"
[ "$TESTS" = 0 ] && [ "$BENCH" = 0 ]
