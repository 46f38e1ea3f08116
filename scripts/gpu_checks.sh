#!/usr/bin/env bash
# Every GPU measurement normlab's docs quote, in one call on one GPU (about 9 minutes on an H100/H200):
#   1. scripts/bench_gpu.py: nanoGPT vs normlab bare / instrumented / eager (and bare-tuned), tokens/s,
#      ratio, MFU, with the instrumented step's breakdown            → docs/performance.md "On a GPU"
#   2. scripts/bench_stack.py --device cuda: one run alone vs joblib vs one stack  → "Many runs on one device"
#   3. tests/test_gpu.py: no host sync in a steady compiled step, no float32 logits, bf16 learns, NCCL
#   4. finding 5's norm share (norm_share.json, which the finding reads) and the effective-rank cost
#
#     NANOGPT=PATH OUT=DIR bash scripts/gpu_checks.sh
#
# NANOGPT is a nanoGPT checkout (or a folder with its model.py); OUT receives the JSON files and logs.
# Each part has its own time limit (T_GPU, T_STACK, T_TEST, T_SHARE, T_RANK seconds), the most important
# first, so one that hangs cannot take the others' time. A folder .whl/ of wheels, when there is one, is
# installed first into a temporary folder (for machines without a package index).
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/gpu}
NANOGPT=${NANOGPT:?set NANOGPT to a nanoGPT checkout (git clone https://github.com/karpathy/nanoGPT)}
mkdir -p "$OUT"
T0=$(date +%s)
elapsed() { echo "[$(($(date +%s) - T0)) s] $*"; }
if compgen -G ".whl/*.whl" >/dev/null; then
    SITE=$(mktemp -d)
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" .whl/*.whl || exit 1
    export PYTHONPATH=$SITE:$PWD/src
fi
export PYTHONUNBUFFERED=1 WANDB_MODE=offline
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"; } 2>&1 | tee "$OUT/env.txt"
elapsed "1. bench_gpu"
timeout "${T_GPU:-260}" python3 scripts/bench_gpu.py --nanogpt "$NANOGPT" --sides nanogpt,bare,instrumented,eager,bare-tuned \
    --breakdown --json "$OUT/gpu.json" 2>&1 | tee "$OUT/bench_gpu.log" | grep -v "^round \|^number of\|^num \|^using fused"
elapsed "2. bench_stack"
timeout "${T_STACK:-150}" python3 scripts/bench_stack.py --device cuda --members 16 --steps 200 --alone-runs 1 \
    --json "$OUT/stack_gpu.json" 2>&1 | tee "$OUT/bench_stack.log" | tail -8
elapsed "3. tests/test_gpu.py"
timeout "${T_TEST:-100}" python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$OUT/test_gpu.log" | tail -6
elapsed "4. norm share, embedding rank"
timeout "${T_SHARE:-60}" python3 -m normlab.bench.norm_share --device cuda --json "$OUT/norm_share.json" 2>&1 | tail -6
timeout "${T_RANK:-30}" python3 scripts/bench_embedding_rank.py --device cuda --presets small,gpt2 --repeats 10 2>&1 | tail -6
elapsed "done"
