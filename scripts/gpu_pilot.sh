#!/usr/bin/env bash
# The GPU pilot of the depth findings (issue 38; docs/findings/index.md, "GPU pilot") in ONE device command of
# at most 10 minutes, install and compilation included:
#   1. the wheels in .whl/ (scripts/gpu_wheels.sh makes them), installed into a temporary folder: the device
#      has no package index and no hydra-core;
#   2. the pilot's corpus built in the background, and a smoke test of the whole path at a tiny shape — one seed of each placement the pilot trains (Pre-LN,
#      LayerNorm Scaling, Mix-LN: 3 runs, so each compiles once before the pilot depends on it), probe, plan,
#      training, verdicts, report — on the same device (about a minute); if it fails, the pilot does not start;
#   3. the pilot, `scripts/reproduce.py --scale pilot --budget B`, B = BUDGET or what TOTAL leaves after the
#      smoke (the pilot measures its step times, fits one train.max_steps into B and trains);
#   4. the report from whatever is on disk (also after a cut), and the verdict table printed last;
#   5. OUT: REPORT.md, plan.json, env.txt, smoke.log, gpu_pilot.log (everything printed) and pilot.tar.gz
#      (every run without its checkpoints, the probe, the figures; 15 MB parts when larger) — at most 8 files,
#      what a device call brings back.
#
#     OUT=DIR [BUDGET=480] [TOTAL=585] bash scripts/gpu_pilot.sh
#
# TOTAL is the whole command's limit in seconds (the device's is 600: keep 15 s for the copy back); BUDGET
# the pilot's own. DEVICE=cpu MICRO=1 runs the same script on a CPU at the smoke's shape (the test that runs
# it before it meets a GPU: tests/reproduce/test_pilot.py). Unpack on your machine with
#   cat OUT/pilot.tar.gz* | tar xz -C outputs/        → outputs/gpu_pilot/ (pilot/, REPORT.md)
# and put the pilot beside the CPU verdicts with
#   python scripts/reproduce.py --from-existing --out CPU_OUT --pilot outputs/gpu_pilot --report-dir docs/findings
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/gpu_pilot_out}
BUDGET=${BUDGET:-480}
TOTAL=${TOTAL:-585}
DEVICE=${DEVICE:-cuda}
WORK=${WORK:-$(mktemp -d)}/gpu_pilot  # the runs themselves (their checkpoints stay here)
T0=$(date +%s)
elapsed() { echo $(($(date +%s) - T0)); }
say() { echo "[$(elapsed) s] $*"; }
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/gpu_pilot.log") 2>&1

if compgen -G ".whl/*.whl" >/dev/null; then
    SITE=$(mktemp -d)
    say "installing $(ls .whl/*.whl | wc -l) wheels from .whl/"
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" .whl/*.whl || exit 1
    export PYTHONPATH=$SITE:$PWD/src
else
    export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled
# every run compiles at once: one Inductor compile worker each instead of a pool of one per core per run
export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-1}
{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, hydra, omegaconf; print('python', __import__('sys').version.split()[0], 'torch', torch.__version__,
    torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU', 'hydra', hydra.__version__)"; } 2>&1 | tee "$OUT/env.txt"
if ! python3 -c "import normlab.study.pilot.run" 2>>"$OUT/env.txt"; then
    say "normlab does not import here (a missing package? see $OUT/env.txt); nothing ran"; exit 1
fi

MICRO_FLAG=${MICRO:+--micro}
# eager by default: on an H100 (2026-11-27) three d_model-32, 12-block runs compiling at once took 174 s to start,
# more than the smoke's whole budget, and the pilot would pay it twice (its probe, its runs); COMPILE=true
# compiles (worth it where the budget is hours, not minutes)
COMPILE_ARG="--override train.compile=${COMPILE:-false}"
# the pilot's corpus, built on the CPU cores while the smoke uses the device (the pilot then finds it ready)
python3 scripts/reproduce.py --scale pilot $MICRO_FLAG --device "$DEVICE" $COMPILE_ARG ${PILOT_ARGS:-} --data-only >"$WORK/data.log" 2>&1 &

say "1. smoke: the whole path at a tiny shape, one seed of each placement, on $DEVICE"
if ! timeout -k 10 "${T_SMOKE:-200}" python3 scripts/reproduce.py --scale pilot --micro --device "$DEVICE" --seeds 1 \
        --budget "${SMOKE_BUDGET:-150}" --max-steps 150 $COMPILE_ARG ${SMOKE_NAMES:-12 13} --out "$WORK/smoke" >"$OUT/smoke.log" 2>&1; then
    tail -30 "$OUT/smoke.log"; say "the smoke failed: the pilot does not start (log: $OUT/smoke.log)"; exit 1
fi
grep -A4 "^Pilot verdicts" "$OUT/smoke.log"

# the pilot's budget: BUDGET, or what TOTAL leaves after the smoke, a hard stop's grace, the report and the
# packing (75 s); the pilot fits its runs into it with a margin of its own, the hard stop is for the unforeseen
LEFT=$((TOTAL - $(elapsed) - 75))
B=$((BUDGET < LEFT ? BUDGET : LEFT))
say "2. the pilot within $B s (scripts/reproduce.py --scale pilot)"
timeout -k 10 $((B + 10)) python3 scripts/reproduce.py --scale pilot $MICRO_FLAG --device "$DEVICE" --budget "$B" \
    $COMPILE_ARG ${PILOT_ARGS:-} --out "$WORK/run"
RC=$?
say "the pilot ended with status $RC"

say "3. the report from what is on disk"
timeout -k 5 "${T_REPORT:-30}" python3 scripts/reproduce.py --from-existing --out "$WORK/run" >"$WORK/report.log" 2>&1 \
    || { tail -20 "$WORK/report.log"; say "the report could not be rebuilt"; }
cp "$WORK/run/REPORT.md" "$WORK/run/pilot/plan.json" "$OUT/" 2>/dev/null

say "4. packing the runs (no checkpoints) into $OUT"
tar -C "$WORK" --exclude=checkpoints --transform 's,^run,gpu_pilot,' -czf "$WORK/pilot.tar.gz" run
if [ "$(stat -c %s "$WORK/pilot.tar.gz")" -gt 15000000 ]; then
    split -b 15000000 -d "$WORK/pilot.tar.gz" "$OUT/pilot.tar.gz."
else
    cp "$WORK/pilot.tar.gz" "$OUT/"
fi
ls -la "$OUT"
say "done (pilot status $RC)"
grep -A8 "^Pilot verdicts" "$WORK/report.log" || echo "no verdicts: see $OUT/gpu_pilot.log"
exit $RC
