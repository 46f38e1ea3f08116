#!/usr/bin/env bash
# Every GPU measurement normlab's docs quote, in one call on one GPU (under 10 minutes: at most 585 s of limits):
#   1. scripts/bench_gpu.py: nanoGPT vs normlab bare / instrumented / eager (and bare-tuned), tokens/s,
#      ratio, MFU, with the instrumented step's breakdown            → docs/performance.md "On a GPU"
#   2. scripts/bench_stack.py --device cuda: 32 runs of model=small one alone, as 16 processes (joblib),
#      as one stack, and as one compiled stack (CUDA graphs)          → "Many runs on one device"
#   3. tests/test_gpu.py: no host sync in a steady compiled step, no float32 logits, bf16 learns, NCCL
#   4. finding 5's norm share (norm_share.json, which the finding reads) and the effective-rank cost
#   5. scripts/bench_stack.py --profile (not in the default PARTS): torch.profiler of a 32-member stack of
#      model=small against one run alone, steady / probed / probed+rank steps, the top kernels by CUDA time
#      and the kernel launches per step → profile.md            → docs/performance.md "On a GPU, after issue 36"
#
#     NANOGPT=PATH OUT=DIR bash scripts/gpu_checks.sh
#     PARTS=stack DEVICE=cpu STACK_MEMBERS=2 STACK_STEPS=3 STACK_JOBLIB=2 STACK_MODES=alone,stacked,joblib \
#         bash scripts/gpu_checks.sh                        # the stack part's dry run on a CPU (tests/test_bench_scripts.py)
#     OUT=DIR PARTS=profile bash scripts/gpu_checks.sh      # the stacked step's kernels (≤ 90 s: T_PROFILE)
#     PARTS=profile DEVICE=cpu PROFILE_MEMBERS=2 PROFILE_BATCH=2 PROFILE_ARGS="--model tiny depth=1" \
#         bash scripts/gpu_checks.sh                        # its dry run on a CPU (tests/test_bench_scripts.py)
#
# NANOGPT is a nanoGPT checkout (or a folder with its model.py), needed by part 1 only; OUT receives the JSON
# files and logs; PARTS picks parts (gpu,stack,test,share,profile; default gpu,stack,test,share). Each part has its own time limit
# (T_GPU, T_STACK, T_TEST, T_SHARE, T_RANK, T_PROFILE seconds), the most important first, so one that hangs cannot take
# the others' time; the stack part also limits each of its modes (T_MODE) and prints its table as each mode
# ends, so a cut-off run keeps what it measured. A folder .whl/ of wheels, when there is one, is installed
# first into a temporary folder (for machines without a package index).
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/gpu}
PARTS=${PARTS:-gpu,stack,test,share}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
T0=$(date +%s)
elapsed() { echo "[$(($(date +%s) - T0)) s] $*"; }
part() { [[ ",$PARTS," == *",$1,"* ]]; }
if compgen -G ".whl/*.whl" >/dev/null; then
    SITE=$(mktemp -d)
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" .whl/*.whl || exit 1
    export PYTHONPATH=$SITE:$PWD/src
fi
export PYTHONUNBUFFERED=1 WANDB_MODE=offline
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"; } 2>&1 | tee "$OUT/env.txt"
if part gpu; then
    NANOGPT=${NANOGPT:?set NANOGPT to a nanoGPT checkout (git clone https://github.com/karpathy/nanoGPT)}
    elapsed "1. bench_gpu"
    timeout "${T_GPU:-180}" python3 scripts/bench_gpu.py --nanogpt "$NANOGPT" --sides nanogpt,bare,instrumented,eager,bare-tuned \
        --breakdown --json "$OUT/gpu.json" 2>&1 | tee "$OUT/bench_gpu.log" | grep -v "^round \|^number of\|^num \|^using fused"
fi
if part stack; then
    # 32 runs of model=small, 150 steps: one alone (~25 s), one stack (~40 s), 16 processes (~70 s), one
    # compiled stack with CUDA graphs (~90 s with its compilation); each mode within T_MODE, all within T_STACK
    elapsed "2. bench_stack"
    timeout "${T_STACK:-230}" python3 scripts/bench_stack.py --device "$DEVICE" --members "${STACK_MEMBERS:-32}" \
        --steps "${STACK_STEPS:-150}" --alone-runs 1 --joblib-jobs "${STACK_JOBLIB:-16}" \
        --modes "${STACK_MODES:-alone,stacked,joblib,compiled}" --compile-mode reduce-overhead --mode-timeout "${T_MODE:-100}" \
        --json "$OUT/stack_gpu.json" 2>&1 | tee "$OUT/bench_stack.log" | grep -v "^  block"
fi
if part test; then
    elapsed "3. tests/test_gpu.py"
    timeout "${T_TEST:-110}" python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$OUT/test_gpu.log" | tail -6
fi
if part share; then
    elapsed "4. norm share, embedding rank"
    timeout "${T_SHARE:-40}" python3 -m normlab.bench.norm_share --device cuda --json "$OUT/norm_share.json" 2>&1 | tail -6
    timeout "${T_RANK:-25}" python3 scripts/bench_embedding_rank.py --device cuda --presets small,gpt2 --repeats 10 2>&1 | tail -6
fi
if part profile; then
    # 32 × model=small, batch 32, probes on: ~10 s to build, 3 kinds × 7 steps of each trainer, the traces' parsing
    elapsed "5. bench_stack --profile"
    # shellcheck disable=SC2086 # PROFILE_ARGS: more arguments, split on purpose
    timeout "${T_PROFILE:-90}" python3 scripts/bench_stack.py --profile --device "$DEVICE" \
        --members "${PROFILE_MEMBERS:-32}" --batch "${PROFILE_BATCH:-32}" --profile-steps "${PROFILE_STEPS:-3}" \
        --top "${PROFILE_TOP:-25}" --out "$OUT" ${PROFILE_ARGS:-} 2>&1 | grep -v "^USDT\|^STAGE:" | tail -120
fi
elapsed "done"
