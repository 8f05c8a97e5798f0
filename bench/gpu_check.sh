#!/usr/bin/env bash
# The GPU check of bt's attention paths, in one call on a lent GPU machine (H100 / H200, CUDA),
# everything it prints also under $OUT (the device tool brings that folder back):
#
#   1. one layer's decode-step attention at Qwen3-4B's shape (bench/prefix_attention_step.py):
#      group buffers, bt's shared path and mlx-lm's copies, float32 and bfloat16, at 16, 36 and
#      80 rows (to 8,192-token prefixes), with --check (batch invariance, bitwise) and
#      --force-fused (MLX's fused kernel must take the group path's shapes);
#   2. the ops per layer of each path (--count-ops);
#   3. `bt continue` end to end at Qwen3-4B's real shapes (36 layers, hidden 2560, intermediate
#      9728, 32 x 8 x 128, vocabulary 151,936; random weights quantized to 4 bits through mlx-lm's
#      classes and nn.quantize), 4 cells of 4k traces, against the plain one-sequence loop and
#      mlx-lm's batch_generate in the same run, with the weights' bytes a decode step reads per
#      second against the card's measured copy bandwidth (bench/continue_throughput.py).
#
#   bash bench/gpu_check.sh                      # on the GPU: real sizes, under 8 minutes
#   bash bench/gpu_check.sh --device cpu --toy   # the same steps at toy sizes on a CPU (< 3 min)
#
# On the lent machine (Python 3.12, no network) MLX comes from what bench/gpu_carry.sh packed
# (.carry1/, .carry2/: the mlx-cuda-13 wheel is larger than one call may carry, so it travels in
# two calls; see bench/RESULTS.md, "The GPU check"). The first call copies .carry1 to .gpu/ (kept
# on the warm machine), the second runs this script, which unpacks both into /tmp/site.
set -euo pipefail
cd "$(dirname "$0")/.."

DEVICE=gpu
TOY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --toy) TOY=1; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown option $1 (--device cpu|gpu, --toy)" >&2; exit 2 ;;
  esac
done
case "$DEVICE" in cpu|gpu) ;; *) echo "gpu_check.sh: --device: expected cpu or gpu, got $DEVICE" >&2; exit 2 ;; esac

OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error

# MLX for CUDA, packed by bench/gpu_carry.sh, when it is here and no MLX is importable yet.
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if ! "$PY" -c "import mlx.core" 2>/dev/null && [ -d .carry2 ]; then
  mkdir -p /tmp/site
  cat .gpu/mlx-cuda.tar.xz.part-* .carry2/mlx-cuda.tar.xz.part-* | xz -d | tar -x -C /tmp/site
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .carry2/*.whl
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

say() { echo "== $*" | tee -a "$LOG"; }
step() {  # step SECONDS COMMAND...: run with a bound, keep going when one step fails
  local limit="$1"; shift
  say "$*"
  if ! timeout "$limit" "$@" 2>&1 | tee -a "$LOG"; then
    say "step failed or ran past ${limit}s (the rest still runs)"
  fi
}

start=$(date +%s)
say "gpu_check on $(hostname), device $DEVICE, toy $TOY, $(date -u +%FT%TZ)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
  --format=csv,noheader | tee -a "$LOG" || true
"$PY" -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, 'mlx-lm', mlx_lm.__version__, mx.default_device())" \
  2>&1 | tee -a "$LOG"

STEP=(bench/prefix_attention_step.py --device "$DEVICE")
if [ "$TOY" = 1 ]; then
  SIZES=("2 64,128")
  ROUNDS=(--steps 3 --rounds 1 --slot-size 256)
else
  SIZES=("2 512,1024" "3 300,700,1024" "4 256,1024,2048,4096,8192")
  ROUNDS=(--steps 20 --rounds 3)
fi
for size in "${SIZES[@]}"; do
  read -r cells anchors <<<"$size"
  for dtype in float32 bfloat16; do
    step 120 "$PY" "${STEP[@]}" --cells "$cells" --anchors "$anchors" --dtype "$dtype" \
      --check --force-fused "${ROUNDS[@]}"
  done
done
step 180 "$PY" "${STEP[@]}" --count-ops --slot-size 256 --paths group,shared,copies

THROUGHPUT=(bench/continue_throughput.py --device "$DEVICE" --peer both --bandwidth --repeats 1
  --reference-cells 1 --reference-branches 1 --batch-size 32)
if [ "$TOY" = 1 ]; then
  step 150 "$PY" "${THROUGHPUT[@]}" --model qwen3-4b-toy --cells 1 --trace-tokens 128 \
    --anchors 32,64 --budget 8 --answer-budget 4 --restarts 8
else
  step 300 "$PY" "${THROUGHPUT[@]}" --model qwen3-4b-real --cells 4 --trace-tokens 4096 \
    --anchors 1024,2048,4096 --budget 256 --answer-budget 128 --restarts 256
fi
say "gpu_check done in $(( $(date +%s) - start )) s; log: $LOG"
